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

  it('pairs the L4 loop legs in either order', () => {
    for (const order of [entries, [...entries].reverse()]) {
      const c = new ConntrackCorrelator(buildContext(input));
      order.forEach((e) => c.add(e));
      const l4 = c.observations().groups.filter((g) => g.kind === 'l4');
      expect(l4.map((g) => `${g.svc.name} ${g.count}`)).toEqual(['api 1']);
      expect(l4[0]!.examples[0]!.map((e) => e.orig.dst)).toEqual(['192.0.2.20', '10.0.3.11']);
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
});
