// The decode-free conntrack pre-check, on real ctnetlink replies recorded in a
// netns (test/fixtures/netlink/ctnetlink-dump.hex): it must pass every message
// the ours rule (model/ours.ts, on the decoded entry) keeps, reject the rest of the IPv4
// ones, pass IPv6 and unreadable messages through, and never throw.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeEntry } from '../../../src/kernel/conntrack/decode.js';
import { keepFor } from '../../../src/kernel/conntrack/dump.js';
import { ConntrackPrefilter } from '../../../src/kernel/conntrack/prefilter.js';
import { NLMSG_DONE, splitMessages } from '../../../src/kernel/netlink/codec.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';
import { NOTHING_OURS, type Ours, tupleRuleOf } from '../../../src/model/ours.js';

const hex = readFileSync(join(import.meta.dirname, '../../fixtures/netlink/ctnetlink-dump.hex'), 'utf8');
const payloads = hex
  .split('\n')
  .filter(Boolean)
  .flatMap((h) => splitMessages(Buffer.from(h, 'hex')))
  .filter((m) => m.type !== NLMSG_DONE)
  .map((m) => m.payload);
const entries = payloads.map((p) => decodeEntry(p));

/** The ours rule itself: what the pre-check must pass. */
const exact = (t: Ours, e: ConntrackEntry): boolean => tupleRuleOf(t)(e) !== undefined;

describe('ConntrackPrefilter on recorded ctnetlink messages', () => {
  it('the fixture has IPv4 TCP and ICMP and IPv6 UDP entries to work with', () => {
    expect(new Set(entries.map((e) => `${e.family}/${e.orig.protoNum}`))).toEqual(new Set(['4/6', '4/1', '6/17']));
  });

  // Targets built from the fixture's own entries: each rule kind, one at a time and together.
  const tcpV4 = entries.find((e) => e.family === 4 && e.orig.protoNum === 6 && e.orig.dport === 80)!;
  const nodePortEntry = entries.find((e) => e.family === 4 && e.orig.dport === 30080)!;
  const cases: [string, Ours][] = [
    ['VIP:port', { ...NOTHING_OURS, vips: [{ address: tcpV4.orig.dst, protoNum: 6, port: 80 }] }],
    [
      'node IP + NodePort',
      {
        ...NOTHING_OURS,
        nodeIps: [nodePortEntry.orig.dst],
        nodePorts: [{ protoNum: 6, port: 30080, healthCheck: false }],
      },
    ],
    [
      'endpoint (reply source)',
      { ...NOTHING_OURS, endpoints: [{ address: tcpV4.reply.src, protoNum: 6, port: tcpV4.reply.sport! }] },
    ],
    ['nothing', NOTHING_OURS],
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
      ...NOTHING_OURS,
      vips: [
        { address: tcpV4.orig.dst, protoNum: 17, port: 80 },
        { address: tcpV4.orig.dst, protoNum: 6, port: 81 },
      ],
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

it('a health-check NodePort keeps no entry, in the rule and in the pre-check', () => {
  const entry = entries.find((e) => e.family === 4 && e.orig.dport === 30080)!;
  const ours: Ours = {
    ...NOTHING_OURS,
    nodeIps: [entry.orig.dst],
    nodePorts: [{ protoNum: 6, port: 30080, healthCheck: true }],
  };
  expect(exact(ours, entry)).toBe(false);
  expect(new ConntrackPrefilter(ours).maybe(payloads[entries.indexOf(entry)]!)).toBe(false);
});
