// The decode-free conntrack pre-check, on real ctnetlink replies recorded in a
// netns (test/fixtures/netlink/ctnetlink-dump.hex): it must pass every message
// the exact match (on the decoded entry) keeps, reject the rest of the IPv4
// ones, pass IPv6 and unreadable messages through, and never throw.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeEntry } from '../../../src/kernel/conntrack/decode.js';
import { keepFor } from '../../../src/kernel/conntrack/dump.js';
import { ConntrackPrefilter, KeySet, type PrefilterTargets } from '../../../src/kernel/conntrack/prefilter.js';
import { NLMSG_DONE, splitMessages } from '../../../src/kernel/netlink/codec.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';

const hex = readFileSync(join(import.meta.dirname, '../../fixtures/netlink/ctnetlink-dump.hex'), 'utf8');
const payloads = hex
  .split('\n')
  .filter(Boolean)
  .flatMap((h) => splitMessages(Buffer.from(h, 'hex')))
  .filter((m) => m.type !== NLMSG_DONE)
  .map((m) => m.payload);
const entries = payloads.map((p) => decodeEntry(p));

/** The same rule as ServiceIndex.match, on a decoded entry. */
function exact(t: PrefilterTargets, e: ConntrackEntry): boolean {
  const p = e.orig.protoNum;
  if (t.vips.some((v) => v.address === e.orig.dst && v.protoNum === p && v.port === e.orig.dport)) return true;
  if (t.nodeIps.includes(e.orig.dst) && t.nodePorts.some((n) => n.protoNum === p && n.port === e.orig.dport))
    return true;
  return t.endpoints.some((x) => x.address === e.reply.src && x.protoNum === p && x.port === e.reply.sport);
}

describe('ConntrackPrefilter on recorded ctnetlink messages', () => {
  it('the fixture has IPv4 TCP and ICMP and IPv6 UDP entries to work with', () => {
    expect(new Set(entries.map((e) => `${e.family}/${e.orig.protoNum}`))).toEqual(new Set(['4/6', '4/1', '6/17']));
  });

  // Targets built from the fixture's own entries: each rule kind, one at a time and together.
  const tcpV4 = entries.find((e) => e.family === 4 && e.orig.protoNum === 6 && e.orig.dport === 80)!;
  const nodePortEntry = entries.find((e) => e.family === 4 && e.orig.dport === 30080)!;
  const cases: [string, PrefilterTargets][] = [
    [
      'VIP:port',
      { vips: [{ address: tcpV4.orig.dst, protoNum: 6, port: 80 }], nodeIps: [], nodePorts: [], endpoints: [] },
    ],
    [
      'node IP + NodePort',
      { vips: [], nodeIps: [nodePortEntry.orig.dst], nodePorts: [{ protoNum: 6, port: 30080 }], endpoints: [] },
    ],
    [
      'endpoint (reply source)',
      {
        vips: [],
        nodeIps: [],
        nodePorts: [],
        endpoints: [{ address: tcpV4.reply.src, protoNum: 6, port: tcpV4.reply.sport! }],
      },
    ],
    ['nothing', { vips: [], nodeIps: [], nodePorts: [], endpoints: [] }],
  ];

  for (const [name, t] of cases) {
    it(`${name}: passes every IPv4 message the exact match keeps and rejects the others; passes IPv6`, () => {
      const f = new ConntrackPrefilter(t);
      // Not vacuous: each rule keeps at least one recorded entry and rejects at least one.
      const kept = entries.filter((e) => exact(t, e)).length;
      if (name !== 'nothing') expect(kept).toBeGreaterThan(0);
      expect(entries.filter((e) => e.family === 4).length).toBeGreaterThan(kept);
      for (const [i, e] of entries.entries()) {
        const want = e.family === 6 || exact(t, e);
        expect(f.maybe(payloads[i]!), `entry ${i}: ${e.orig.src} -> ${e.orig.dst}:${e.orig.dport}`).toBe(want);
      }
      // At the socket: the same decisions on the whole recorded datagrams, before message objects exist.
      const keep = keepFor(() => f);
      const kept2 = hex
        .split('\n')
        .filter(Boolean)
        .flatMap((h) => splitMessages(Buffer.from(h, 'hex'), 0, undefined, keep))
        .filter((m) => m.type !== NLMSG_DONE);
      expect(kept2.map((m) => decodeEntry(m.payload))).toEqual(entries.filter((e) => e.family === 6 || exact(t, e)));
    });
  }

  it('the wrong protocol or port for the same address is rejected', () => {
    const f = new ConntrackPrefilter({
      vips: [
        { address: tcpV4.orig.dst, protoNum: 17, port: 80 },
        { address: tcpV4.orig.dst, protoNum: 6, port: 81 },
      ],
      nodeIps: [],
      nodePorts: [],
      endpoints: [],
    });
    expect(f.maybe(payloads[entries.indexOf(tcpV4)]!)).toBe(false);
  });

  it('truncated and corrupted messages never throw; anything it cannot read is passed to the decoder', () => {
    const t = cases[0]![1];
    const f = new ConntrackPrefilter(t);
    const p = payloads[entries.indexOf(tcpV4)]!;
    for (let cut = 0; cut < p.length; cut++) expect(() => f.maybe(p.subarray(0, cut))).not.toThrow();
    for (let i = 0; i < p.length; i++) {
      for (const v of [0x00, 0xff, 0x03]) {
        const c = Buffer.from(p);
        c[i] = v;
        expect(() => f.maybe(c)).not.toThrow();
      }
    }
    // A length field that overruns its container: passed through (the decoder reports it).
    const bad = Buffer.from(p);
    bad.writeUInt16LE(0xfff0, 4);
    expect(f.maybe(bad)).toBe(true);
    expect(f.maybe(Buffer.alloc(0))).toBe(true);
  });
});

describe('KeySet', () => {
  it('answers like a Set<number> for keys up to 2^48, duplicates and empty sets included', () => {
    let seed = 7;
    const rnd = (): number => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
    for (const n of [0, 1, 2, 3, 100, 5000]) {
      const keys = Array.from({ length: n }, () => Math.floor(rnd() * 2 ** 32) * 65536 + Math.floor(rnd() * 65536));
      if (n > 1) keys.push(keys[0]!, keys[1]!); // duplicates
      const oracle = new Set(keys);
      const ks = new KeySet(keys);
      expect(ks.size).toBe(oracle.size);
      for (const k of keys) expect(ks.has(k)).toBe(true);
      for (let i = 0; i < 2000; i++) {
        const probe = i % 2 ? Math.floor(rnd() * 2 ** 48) : (keys[i % Math.max(1, n)] ?? 0) + 1;
        expect(ks.has(probe)).toBe(oracle.has(probe));
      }
    }
    expect(new KeySet([0, 2 ** 48 - 1]).has(2 ** 48 - 1)).toBe(true);
    expect(new KeySet([5]).has(4)).toBe(false);
  });
});
