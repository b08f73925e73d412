// The viptab buckets (src/capture/ebpf-maps.ts VipTable, native/bpf/clbprobe.bpf.c vip_find):
// the layout against the program's BTF, every VIP entry in its key's bucket or, when the
// bucket is full, marked `more` (looked up in the hash), and entries that keep their place
// while their key stays (a bucket is rewritten under a reader; only changed entries may tear).
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import * as L from '../../../src/capture/bpf-layout.js';
import { vipOf } from '../../../src/capture/bpf-layout.js';
import { bpfObjectPath } from '../../../src/capture/ebpf.js';
import { VipTable } from '../../../src/capture/ebpf-maps.js';
import { address16, type Targets } from '../../../src/capture/targets.js';
import { Btf } from '../../support/btf.js';
import { syncedMaps } from '../../support/fake-bpf-maps.js';
import { bucketMates, vipBucket } from '../../support/vip-buckets.js';

const targets = (vips: Targets['vips']): Targets => ({ vips, nodePorts: [], localPrefixes: [] });

/** Bucket index -> its entries (address, port, proto, slot; null = free) and `more`. */
function decode(m: Map<string, string>) {
  const out = new Map<number, { entries: ({ addr: string; tag: number; slot: number } | null)[]; more: number }>();
  for (const [k, v] of m) {
    const b = Buffer.from(v, 'hex');
    expect(b.length).toBe(L.VIP_BUCKET_SIZE);
    const entries = Array.from({ length: L.VIP_BUCKET_ENTRIES }, (_, i) => {
      const e = b.subarray(i * L.VIP_ENT_SIZE, (i + 1) * L.VIP_ENT_SIZE);
      const tag = e.readUInt32LE(L.VIP_ENT_TAG);
      return tag ? { addr: e.subarray(0, 16).toString('hex'), tag, slot: e.readUInt32LE(L.VIP_ENT_SLOT) } : null;
    });
    out.set(Buffer.from(k, 'hex').readUInt32LE(0), { entries, more: b.readUInt32LE(L.VIP_BUCKET_MORE) });
  }
  return out;
}

describe('viptab buckets', () => {
  it('match the program BTF', () => {
    if (!existsSync(bpfObjectPath())) throw new Error(`${bpfObjectPath()} missing: npm run build`);
    const btf = Btf.fromObject(bpfObjectPath());
    expect(btf.map(L.MAP_VIPTAB)).toMatchObject({
      type: 2,
      maxEntries: L.VIPTAB_BUCKETS,
      keySize: 4,
      valueSize: L.VIP_BUCKET_SIZE,
    });
    const b = btf.struct('vip_bucket');
    expect(b.size).toBe(L.VIP_BUCKET_SIZE);
    expect(b.members.e).toMatchObject({
      offset: 0,
      size: L.VIP_BUCKET_ENTRIES * L.VIP_ENT_SIZE,
      nelems: L.VIP_BUCKET_ENTRIES,
    });
    expect(b.members.more).toMatchObject({ offset: L.VIP_BUCKET_MORE, size: 4 });
    const e = btf.struct('vip_ent');
    expect(e.size).toBe(L.VIP_ENT_SIZE);
    expect(e.members.addr).toMatchObject({ offset: L.VIP_ENT_ADDR, size: 16 });
    expect(e.members.tag).toMatchObject({ offset: L.VIP_ENT_TAG, size: 4 });
    expect(e.members.slot).toMatchObject({ offset: L.VIP_ENT_SLOT, size: 4 });
  });

  it('an entry holds the address as in the packet, port | proto << 16 | family << 24, and the slot', () => {
    const v4 = L.vipEntry(address16('10.0.0.100'), true, 80, 17, 7);
    expect(v4.subarray(0, 16).toString('hex')).toBe(`0a000064${'00'.repeat(12)}`);
    expect(v4.readUInt32LE(L.VIP_ENT_TAG)).toBe(80 | (17 << 16) | (4 << 24));
    expect(v4.readUInt32LE(L.VIP_ENT_SLOT)).toBe(7);
    const v6 = L.vipEntry(address16('2001:db8::1'), false, 0, 6, 0);
    expect(v6.subarray(0, 16).toString('hex')).toBe(`20010db8${'00'.repeat(11)}01`);
    expect(v6.readUInt32LE(L.VIP_ENT_TAG)).toBe((6 << 16) | (6 << 24));
  });

  it('puts every VIP entry in its bucket, a third one of a bucket in the hash only, and keeps places', () => {
    const { kernel, sync } = syncedMaps([]);
    const viptab = () => decode(kernel.maps.get(L.MAP_VIPTAB)!);
    const [b, c, d] = bucketMates('10.0.0.100', 80, 'tcp', 3);
    const vip = (address: string) => ({ address, port: 80, proto: 'tcp' as const });
    const at = vipBucket('10.0.0.100', 80, 'tcp');
    const hex = (a: string) => address16(a).subarray(12).toString('hex') + '00'.repeat(12);

    sync.sync(targets([vip('10.0.0.100'), vip(b!), vip(c!), vip('2001:db8::1')]));
    let t = viptab();
    expect(t.size).toBe(2);
    expect(t.get(at)!.entries.map((e) => e?.addr)).toEqual([hex('10.0.0.100'), hex(b!)]);
    expect(t.get(at)!.more).toBe(1);
    // Every key is in its hash, the bucket's hash-only one included.
    expect(kernel.maps.get(L.MAP_VIPS4)!.size).toBe(3);
    const v6 = t.get(vipBucket('2001:db8::1', 80, 'tcp'))!;
    expect(v6.entries[0]).toMatchObject({
      addr: address16('2001:db8::1').toString('hex'),
      tag: 80 | (6 << 16) | (6 << 24),
    });
    expect(v6.more).toBe(0);

    // The first key goes: its entry is freed, the other keeps its place, the hash-only key stays there.
    sync.sync(targets([vip(b!), vip(c!), vip('2001:db8::1')]));
    t = viptab();
    expect(t.get(at)!.entries.map((e) => e?.addr ?? null)).toEqual([null, hex(b!)]);
    expect(t.get(at)!.more).toBe(1);
    // A new key takes the free entry.
    sync.sync(targets([vip(b!), vip(c!), vip(d!), vip('2001:db8::1')]));
    t = viptab();
    expect(t.get(at)!.entries.map((e) => e?.addr)).toEqual([hex(d!), hex(b!)]);
    // The hash-only key goes: `more` clears; a bucket with no key left is dropped.
    sync.sync(targets([vip(b!), vip(d!)]));
    t = viptab();
    expect(t.get(at)!.more).toBe(0);
    expect(t.size).toBe(1);
    // Slots in entries are the to_lb slots of their keys.
    expect(
      t
        .get(at)!
        .entries.map((e) => e!.slot)
        .every((s) => s > 0),
    ).toBe(true);
  });

  it('reports what changed: keys added and removed once each, and only buckets whose value changed', () => {
    const table = new VipTable();
    const key = (a: string, port = 80) => vipOf(address16(a), !a.includes(':'), port, 6);
    const [b, c, d] = bucketMates('10.0.0.100', 80, 'tcp', 3).map((a) => key(a));
    const a = key('10.0.0.100');
    const [v6, w6, x6] = ['2001:db8::1', ...bucketMates('2001:db8::1', 80, 'tcp', 2)].map((x) => key(x));
    const at = a.bucket;
    const at6 = v6!.bucket;

    let ch = table.update([a, b!, c!, a, v6!, w6!, x6!]); // a twice: one key
    expect(ch.added).toEqual([a, b, c, v6, w6, x6]);
    expect(ch.removed).toEqual([]);
    expect(ch.buckets.sort()).toEqual([at, at6].sort());
    expect(table.counts()).toEqual({ inBuckets: 4, more: 2 });
    // Nothing new: nothing changed.
    ch = table.update([x6!, w6!, v6!, c!, b!, a]);
    expect(ch).toEqual({ added: [], removed: [], buckets: [] });

    // The hash-only key goes as another comes to the hash: the bucket's value stays as it was.
    ch = table.update([a, b!, d!, v6!, w6!, x6!]);
    expect(ch).toEqual({ added: [d], removed: [c], buckets: [] });
    expect(table.has(c!.key, c!.bucket)).toBe(false);
    expect(table.has(d!.key, d!.bucket)).toBe(true);

    // An entry's key goes and comes back: it takes a free entry again (the same one, the only free).
    ch = table.update([b!, d!, w6!, x6!]);
    expect(ch.removed.map((v) => v.key).sort()).toEqual([a.key, v6!.key].sort());
    expect(ch.buckets.sort()).toEqual([at, at6].sort());
    ch = table.update([a, b!, d!, v6!, w6!, x6!]);
    expect(ch.added).toEqual([a, v6]);
    const slotOf = () => 1;
    expect(table.bucket(at, slotOf).subarray(0, 4).toString('hex')).toBe('0a000064');
    expect(table.bucket(at6, slotOf).subarray(0, 16).equals(address16('2001:db8::1'))).toBe(true);
    expect(table.counts()).toEqual({ inBuckets: 4, more: 2 });

    // Everything goes: every bucket is written (as zeros), none is in use.
    ch = table.update([]);
    expect(ch.removed).toHaveLength(6);
    expect(table.inUse(at) || table.inUse(at6)).toBe(false);
    expect(table.bucket(at, slotOf).equals(Buffer.alloc(L.VIP_BUCKET_SIZE))).toBe(true);
    expect(table.counts()).toEqual({ inBuckets: 0, more: 0 });
  });
});
