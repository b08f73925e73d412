// The kept form of a conntrack entry (src/kernel/conntrack/compact.ts) against the decoder, on the
// real recorded kernel dump: the same entry field for field, the same conntrack(8) text, the same
// JSON; a new version shares its tuples; ICMP, which it does not hold, is refused. And the agent's
// table fed decoded messages (its event path) keeps and counts exactly what it keeps from entries.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConntrackTable, classifyEntry } from '../../../src/agent/conntrack-table.js';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments } from '../../../src/cluster/file.js';
import { clusterList, LAB } from '../../../src/demo/lab.js';
import { CompactEntry } from '../../../src/kernel/conntrack/compact.js';
import * as C from '../../../src/kernel/conntrack/constants.js';
import { CtView, decodeEntry } from '../../../src/kernel/conntrack/decode.js';
import { formatConntrack } from '../../../src/kernel/conntrack/format.js';
import { MessageWriter, NLM_F_CREATE, NLM_F_REQUEST, splitMessages } from '../../../src/kernel/netlink/codec.js';

const hex = readFileSync(join(import.meta.dirname, '../../fixtures/netlink/ctnetlink-dump.hex'), 'utf8')
  .trim()
  .split('\n');
const payloads = hex
  .flatMap((l) => splitMessages(Buffer.from(l, 'hex')))
  .filter((m) => m.type >> 8 === C.NFNL_SUBSYS_CTNETLINK)
  .map((m) => m.payload);
const isIcmp = (p: Buffer) => decodeEntry(p).orig.icmpType !== undefined;
const json = (x: unknown) => JSON.stringify(x, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));

describe('CompactEntry', () => {
  it('reads as the decoded entry: fields, conntrack -L text, JSON (IPv4, IPv6, ids from 2^31)', () => {
    const ported = payloads.filter((p) => !isIcmp(p));
    expect(ported.length).toBeGreaterThanOrEqual(3);
    expect(ported.some((p) => decodeEntry(p).id >= 2 ** 31)).toBe(true);
    expect(ported.some((p) => decodeEntry(p).family === 6)).toBe(true);
    const v = new CtView();
    for (const p of ported) {
      const want = decodeEntry(p);
      for (const c of [CompactEntry.fromView(v.decode(p, 0, p.length))!, CompactEntry.fromEntry(want)!]) {
        expect(c.toEntry()).toEqual(want);
        expect(json(c)).toBe(json(want));
        expect(formatConntrack(c, { extended: true, id: true })).toBe(
          formatConntrack(want, { extended: true, id: true }),
        );
        for (const k of [
          'family',
          'proto',
          'tcpState',
          'status',
          'statusFlags',
          'timeoutS',
          'mark',
          'zone',
          'id',
          'use',
        ] as const)
          expect(c[k]).toEqual(want[k]);
        expect([c.orig.src, c.orig.dst, c.orig.sport, c.orig.dport, c.orig.protoNum]).toEqual([
          want.orig.src,
          want.orig.dst,
          want.orig.sport,
          want.orig.dport,
          want.orig.protoNum,
        ]);
        expect([c.reply.src, c.reply.dst, c.reply.sport, c.reply.dport]).toEqual([
          want.reply.src,
          want.reply.dst,
          want.reply.sport,
          want.reply.dport,
        ]);
      }
    }
  });

  it('does not hold ICMP entries', () => {
    const icmp = payloads.filter(isIcmp);
    expect(icmp.length).toBeGreaterThan(0);
    for (const p of icmp) {
      expect(CompactEntry.fromView(new CtView().decode(p, 0, p.length))).toBeUndefined();
      expect(CompactEntry.fromEntry(decodeEntry(p))).toBeUndefined();
    }
  });

  it('a new version shares the tuples when they are the same, and only then', () => {
    const p = message(7, '10.244.1.10', 40000, '10.0.0.100', 80, '10.244.1.20', 8080, C.IPS_CONFIRMED, 1);
    const v = new CtView();
    const first = CompactEntry.fromView(v.decode(p, 0, p.length))!;
    const again = CompactEntry.fromView(v.decode(p, 0, p.length), first)!;
    expect(again).not.toBe(first);
    expect([again.orig, again.reply]).toEqual([first.orig, first.reply]);
    expect(again.orig).toBe(first.orig);
    expect(again.reply).toBe(first.reply);
    // Another reply source (the id reused after a lost DESTROY): a new reply tuple.
    const moved = message(7, '10.244.1.10', 40000, '10.0.0.100', 80, '10.244.1.21', 8080, C.IPS_CONFIRMED, 1);
    const changed = CompactEntry.fromView(v.decode(moved, 0, moved.length), first)!;
    expect(changed.orig).toBe(first.orig);
    expect(changed.reply).not.toBe(first.reply);
    expect(changed.reply.src).toBe('10.244.1.21');
    expect(CompactEntry.fromEntry(decodeEntry(p), first)!.orig).toBe(first.orig);
    expect(CompactEntry.fromEntry(decodeEntry(moved), first)!.reply).not.toBe(first.reply);
  });
});

/** A TCP entry message client:sport -> dst:dport, replied from rsrc:rsport, as the kernel sends it. */
function message(
  id: number,
  client: string,
  sport: number,
  dst: string,
  dport: number,
  rsrc: string,
  rsport: number,
  status: number,
  state: number,
): Buffer {
  const ip = (s: string) => Buffer.from(s.split('.').map(Number));
  const w = new MessageWriter((C.NFNL_SUBSYS_CTNETLINK << 8) | C.IPCTNL_MSG_CT_NEW, NLM_F_REQUEST | NLM_F_CREATE)
    .u8(C.AF_INET)
    .u8(0)
    .u16(0);
  const tuple = (type: number, s: string, d: string, sp: number, dp: number): void => {
    w.beginNested(type)
      .beginNested(C.CTA_TUPLE_IP)
      .attr(C.CTA_IP_V4_SRC, ip(s))
      .attr(C.CTA_IP_V4_DST, ip(d))
      .endNested();
    w.beginNested(C.CTA_TUPLE_PROTO)
      .attrU8(C.CTA_PROTO_NUM, 6)
      .attrU16be(C.CTA_PROTO_SRC_PORT, sp)
      .attrU16be(C.CTA_PROTO_DST_PORT, dp)
      .endNested()
      .endNested();
  };
  tuple(C.CTA_TUPLE_ORIG, client, dst, sport, dport);
  tuple(C.CTA_TUPLE_REPLY, rsrc, client, rsport, sport);
  w.attrU32be(C.CTA_STATUS, status).attrU32be(C.CTA_TIMEOUT, 120);
  w.beginNested(C.CTA_PROTOINFO)
    .beginNested(C.CTA_PROTOINFO_TCP)
    .attrU8(C.CTA_PROTOINFO_TCP_STATE, state)
    .endNested()
    .endNested();
  w.attrU32be(C.CTA_USE, 1).attrU32be(C.CTA_ID, id);
  return w.finish().subarray(16);
}

describe('agent conntrack table fed decoded messages', () => {
  const index = () => {
    const { objects } = classifyDocuments([clusterList('Local')]);
    return new ServiceIndex(buildClusterView(objects, { nodeName: LAB.node1Name }), {
      nodeIps: [LAB.node1],
      ipvsIps: [],
      podCidrs: [LAB.podCidr],
    });
  };
  // The loop of the lab: out to the VIP, back in on the NodePort (ids above 2^31: the kernel's hashes).
  const out = message(0x9000_0001, LAB.clientPod, 40000, LAB.vip, 80, LAB.vip, 80, C.IPS_CONFIRMED, 1);
  const outReplied = message(
    0x9000_0001,
    LAB.clientPod,
    40000,
    LAB.vip,
    80,
    LAB.vip,
    80,
    C.IPS_CONFIRMED | C.IPS_SEEN_REPLY,
    3,
  );
  const back = message(
    0x9000_0002,
    LAB.clientPod,
    40000,
    LAB.node1,
    LAB.nodePort,
    LAB.serverPod,
    LAB.serverPort,
    C.IPS_CONFIRMED,
    1,
  );
  const unrelated = message(
    3,
    LAB.clientPod,
    40001,
    '192.0.2.1',
    443,
    '192.0.2.1',
    443,
    C.IPS_CONFIRMED | C.IPS_SEEN_REPLY,
    3,
  );

  it('keeps, updates, pairs and counts as the entry path does', () => {
    const byView = new ConntrackTable(index());
    const byEntry = new ConntrackTable(index());
    const v = new CtView();
    const steps: ['NEW' | 'UPDATE' | 'DESTROY', Buffer][] = [
      ['NEW', unrelated],
      ['NEW', out],
      ['UPDATE', outReplied],
      ['NEW', back],
    ];
    for (const [type, p] of steps) {
      const a = byView.event(type, v.decode(p, 0, p.length), 5);
      const b = byEntry.event(type, decodeEntry(p), 5);
      expect(a).toBe(b);
    }
    const view = (t: ConntrackTable) =>
      [...t.entries()].map((k) => ({ ...k, entry: k.entry.toEntry(), class: classifyEntry(k) }));
    expect(view(byView)).toEqual(view(byEntry));
    expect(view(byView).map((k) => [k.entry.id, k.class, k.entry.tcpState])).toEqual([
      [0x9000_0001, 'loopback_pair', 'ESTABLISHED'],
      [0x9000_0002, 'loopback_pair', 'SYN_SENT'],
    ]);
    for (const p of [back, out, unrelated]) {
      expect(byView.event('DESTROY', v.decode(p, 0, p.length), 9)).toBe(byEntry.event('DESTROY', decodeEntry(p), 9));
    }
    expect(byView.size).toBe(0);
    expect([...byView.outcomes.values()]).toEqual([...byEntry.outcomes.values()]);
    expect([...byView.outcomes.values()].map((c) => c.loopback_pair)).toEqual([1]);
  });

  it('an update is a new entry object (what the diagnosis compares) with the tuples shared', () => {
    const t = new ConntrackTable(index());
    const v = new CtView();
    t.event('NEW', v.decode(out, 0, out.length), 1);
    const k = [...t.entries()][0]!;
    const before = k.entry;
    t.event('UPDATE', v.decode(outReplied, 0, outReplied.length), 2);
    expect(k.entry).not.toBe(before);
    expect(k.entry.orig).toBe(before.orig);
    expect([k.firstSeenMs, k.lastSeenMs, k.entry.statusFlags]).toEqual([1, 2, ['SEEN_REPLY', 'CONFIRMED']]);
  });
});
