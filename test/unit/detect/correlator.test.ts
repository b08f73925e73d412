// The correlator over a stream: pairs regardless of order, keeps only the
// entries that matter, and the result does not depend on holding the table.
import { describe, expect, it } from 'vitest';
import { buildContext } from '../../../src/detect/context.js';
import { ConntrackCorrelator } from '../../../src/detect/correlator.js';
import { diagnose } from '../../../src/detect/index.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';
import { loadCase } from './fixture-bundle.js';

function noise(n: number): Generator<ConntrackEntry> {
  return (function* () {
    for (let i = 0; i < n; i++) {
      const src = `10.9.${(i >> 8) & 255}.${i & 255}`;
      yield {
        family: 4,
        proto: 'tcp',
        orig: { src, dst: '10.0.9.9', protoNum: 6, sport: 1024 + (i % 60000), dport: 443 },
        reply: { src: '10.0.9.9', dst: src, protoNum: 6, sport: 443, dport: 1024 + (i % 60000) },
        tcpState: 'ESTABLISHED',
        status: 14,
        statusFlags: ['SEEN_REPLY', 'ASSURED', 'CONFIRMED'],
        timeoutS: 431999,
        mark: 0,
        zone: 0,
        id: i,
      };
    }
  })();
}

describe('ConntrackCorrelator', () => {
  const { input } = loadCase('tke-ipvs-unbound-l4-loop');
  const entries = [...input.conntrack!];
  // The loop's return leg (to node-a's NodePort of api), and the same socket's leg to another Service's NodePort.
  const back = entries.find((e) => e.orig.dst === '10.0.3.11')!;
  const other = input.cluster.services.find(
    (s) => s.name !== 'api' && s.protocol === 'TCP' && s.nodePort !== undefined && s.nodePort !== back.orig.dport,
  )!;
  const toOther = {
    ...back,
    orig: { ...back.orig, dport: other.nodePort },
    reply: { ...back.reply, sport: other.nodePort },
  };

  it('pairs the L4 loop legs in either order', () => {
    for (const order of [entries, [...entries].reverse()]) {
      const c = new ConntrackCorrelator(buildContext(input));
      order.forEach((e) => c.add(e));
      const l4 = c.observations().groups.filter((g) => g.kind === 'l4');
      expect(l4.map((g) => `${g.svc.name} ${g.count}`)).toEqual(['api 1']);
      expect(l4[0]!.examples[0]!.map((e) => e.orig.dst)).toEqual(['192.0.2.20', '10.0.3.11']);
    }
  });

  it("pairs no legs of two Services: one socket to one Service's VIP and another's NodePort is no loop", () => {
    const c = new ConntrackCorrelator(buildContext(input));
    for (const e of entries) c.add(e === back ? toOther : e);
    expect(c.observations().groups.filter((g) => g.kind === 'l4')).toEqual([]);
  });

  it("pairs the loop of one Service though the socket also has a leg to another's NodePort, in any order", () => {
    const out = entries.find((e) => e !== back && e.orig.sport === back.orig.sport)!;
    for (const order of [
      [toOther, out, back],
      [out, toOther, back],
      [back, toOther, out],
    ]) {
      const c = new ConntrackCorrelator(buildContext(input));
      for (const e of order) c.add(e);
      const l4 = c.observations().groups.filter((g) => g.kind === 'l4');
      expect(l4.map((g) => `${g.svc.name} ${g.count}`)).toEqual(['api 1']);
    }
  });

  it('streams 100k irrelevant entries from a generator without keeping them', () => {
    const c = new ConntrackCorrelator(buildContext(input));
    for (const e of noise(100_000)) c.add(e);
    entries.forEach((e) => c.add(e));
    const obs = c.observations();
    expect(obs.seen).toBe(100_000 + entries.length);
    expect(obs.pending).toBeLessThan(10);
    expect(obs.groups.some((g) => g.kind === 'l4')).toBe(true);
  });

  it('diagnose() accepts a generator the same as an array', () => {
    const fromArray = diagnose(input).findings;
    const fromGen = diagnose({
      ...input,
      conntrack: (function* () {
        yield* entries;
      })(),
    }).findings;
    expect(fromGen).toEqual(fromArray);
  });

  it('refuses entries after the result was taken (a stream is read once)', () => {
    const c = new ConntrackCorrelator(buildContext(input));
    c.observations();
    expect(() => c.add(entries[0]!)).toThrow(/after observations/);
  });

  it('without conntrack, says that nothing can be shown active', () => {
    const { conntrack: _drop, ...rest } = input;
    const r = diagnose(rest);
    expect(r.findings.filter((f) => f.severity === 'active')).toEqual([]);
    expect(r.warnings.join('\n')).toMatch(/no conntrack entries read/);
  });

  describe('L7 legs of one busy client (bundles/l7-ingress-loop: Ingress VIP 10.0.0.50, NodePort 30080)', () => {
    const l7 = loadCase('l7-ingress-loop').input;
    const [outbound, inbound] = l7.conntrack! as ConntrackEntry[];
    /** A fresh copy of leg `e` with source port `sport` and conntrack's start time `startS` (seconds), if given. */
    const leg = (e: ConntrackEntry, sport: number, startS?: number): ConntrackEntry => {
      const copy = JSON.parse(JSON.stringify(e)) as ConntrackEntry;
      copy.orig.sport = sport;
      copy.reply.dport = sport;
      if (startS !== undefined) copy.startNs = BigInt(startS) * 1_000_000_000n;
      return copy;
    };

    it('keeps a bounded number of legs per client and Service, and says how many it left out', () => {
      const c = new ConntrackCorrelator(buildContext(l7));
      for (let i = 0; i < 5000; i++) c.add(leg(outbound!, 20_000 + i));
      c.add(inbound!);
      const obs = c.observations();
      expect(obs.groups.filter((g) => g.kind === 'l7').map((g) => `${g.svc.name} ${g.count}`)).toEqual(['web 1']);
      expect(obs.overflowed).toBeGreaterThan(0);
      expect(obs.pending).toBeLessThan(5000);
      const r = diagnose({
        ...l7,
        conntrack: [...Array.from({ length: 5000 }, (_, i) => leg(outbound!, 20_000 + i)), inbound!],
      });
      expect(r.warnings.join('\n')).toContain(`conntrack correlation incomplete: ${obs.overflowed} relevant entries`);
    });

    it("keeps a busy client's newest legs: a loop two minutes after 1,000 older legs is found", () => {
      const c = new ConntrackCorrelator(buildContext(l7));
      for (let i = 0; i < 1000; i++) c.add(leg(outbound!, 20_000 + i, 0));
      c.add(leg(outbound!, 40_000, 120));
      c.add(leg(inbound!, 40_001, 120));
      const obs = c.observations();
      expect(obs.groups.filter((g) => g.kind === 'l7').map((g) => `${g.svc.name} ${g.count}`)).toEqual(['web 1']);
      expect(obs.overflowed).toBeGreaterThan(0);
    });

    it('pairs each inbound leg with a bounded lookup: 30,000 unmatched legs each way in under 3 s', () => {
      // Outbound legs a minute older than the inbound ones (timestamps on): no pair, so every lookup reads its list.
      const c = new ConntrackCorrelator(buildContext(l7));
      for (let i = 0; i < 30_000; i++) {
        c.add(leg(outbound!, 1_000 + i, 0));
        c.add(leg(inbound!, 31_000 + i, 60));
      }
      const started = performance.now();
      const obs = c.observations();
      expect(performance.now() - started).toBeLessThan(3000);
      expect(obs.groups.filter((g) => g.kind === 'l7')).toEqual([]);
    });
  });
});
