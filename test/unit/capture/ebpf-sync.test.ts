// TargetSync (src/capture/ebpf-maps.ts) against a model of the kernel's maps: after every sync
// the maps hold exactly what the encoders lay out in full for the same targets, slots and table;
// only changed entries are written; a write that fails leaves work the next sync completes; a
// key keeps its slot and a slot its key through removals and re-adds, also once slots run out;
// NodePorts held get the slots of a family the node gains local sources of.
import { describe, expect, it } from 'vitest';
import {
  isVip4,
  MAP_CONFIG,
  MAP_FILTERS,
  MAP_HOSTS4,
  MAP_HOSTS6,
  MAP_NODEPORTS,
  MAP_VIPS4,
  MAP_VIPS6,
  MAP_VIPTAB,
  NODEPORT_SLOT_V4,
  NODEPORT_SLOT_V6,
  nodePortIndex,
  textBytes,
  u32Value,
  VIPTAB_BUCKETS,
  type Vip,
} from '../../../src/capture/bpf-layout.js';
import { TARGET_MAPS, TargetSync, wantedMaps } from '../../../src/capture/ebpf-maps.js';
import { CaptureError } from '../../../src/capture/errors.js';
import type { Targets } from '../../../src/capture/targets.js';
import { ARRAYS, FakeMaps, type HexMaps } from '../../support/fake-bpf-maps.js';
import { bucketMates } from '../../support/vip-buckets.js';

/** The maps in full from the real encoders (wantedMaps, the table's buckets), hex, without array entries of zeros. */
function expected(t: Targets, sync: TargetSync): HexMaps {
  const w = wantedMaps(t, sync.slots);
  const slotOf = (v: Vip) => sync.slots.find(v.counterId);
  const out: HexMaps = new Map(TARGET_MAPS.map((m) => [m, new Map()]));
  const put = (name: string, key: Buffer, value: Buffer) => {
    if (!(ARRAYS.has(name) && value.every((b) => b === 0)))
      out.get(name)!.set(key.toString('hex'), value.toString('hex'));
  };
  for (const v of w.vips) put(isVip4(v.key) ? MAP_VIPS4 : MAP_VIPS6, textBytes(v.key), u32Value(slotOf(v)));
  for (let b = 0; b < VIPTAB_BUCKETS; b++) put(MAP_VIPTAB, u32Value(b), sync.table.bucket(b, slotOf));
  for (const [k, flags] of w.hosts4) put(MAP_HOSTS4, textBytes(k), u32Value(flags));
  for (const [k, flags] of w.hosts6) put(MAP_HOSTS6, textBytes(k), u32Value(flags));
  for (const [i, value] of w.nodePorts) put(MAP_NODEPORTS, u32Value(i), u32Value(value));
  put(MAP_CONFIG, u32Value(0), w.config);
  put(MAP_FILTERS, u32Value(0), w.filters);
  return out;
}

/** Entries that differ between two layouts (written, changed or gone): what a sync from a to b writes. */
function changes(a: HexMaps, b: HexMaps): number {
  let n = 0;
  for (const name of TARGET_MAPS) {
    const x = a.get(name)!;
    const y = b.get(name)!;
    for (const [k, v] of y) if (x.get(k) !== v) n++;
    for (const k of x.keys()) if (!y.has(k)) n++;
  }
  return n;
}

function rng(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

// Pools the steps draw from: bucket mates (a bucket's third key is looked up in the hash only),
// both families, port 0 (any port), every protocol, NodePorts per protocol, host addresses
// beyond the few compared in place (so the hosts maps have entries).
const mates4 = ['10.0.0.100', ...bucketMates('10.0.0.100', 80, 'tcp', 4)];
const mates6 = ['2001:db8::100', ...bucketMates('2001:db8::100', 80, 'tcp', 3)];
const VIPS: Targets['vips'] = [
  ...mates4.map((address) => ({ address, port: 80, proto: 'tcp' as const })),
  ...mates6.map((address) => ({ address, port: 80, proto: 'tcp' as const })),
  ...Array.from({ length: 40 }, (_, i) => ({
    address: `10.1.${i >> 3}.${i}`,
    port: [80, 443, 0, 53][i % 4]!,
    proto: (['tcp', 'tcp', 'sctp', 'udp'] as const)[i % 4]!,
  })),
  ...Array.from({ length: 12 }, (_, i) => ({
    address: `fd00:10::${i.toString(16)}`,
    port: i % 3 ? 443 : 0,
    proto: i % 2 ? ('udp' as const) : ('tcp' as const),
  })),
];
const NODE_PORTS: Targets['nodePorts'] = Array.from({ length: 30 }, (_, i) => ({
  port: 30000 + (i >> 1),
  proto: (['tcp', 'udp', 'sctp'] as const)[i % 3]!,
}));
const PREFIXES: Targets['localPrefixes'] = [
  { cidr: '10.244.1.0/24', bound: false },
  { cidr: 'fd00:244::/64', bound: false },
  ...Array.from({ length: 8 }, (_, i) => ({ cidr: `10.20.0.${i + 2}`, bound: true })),
  ...Array.from({ length: 8 }, (_, i) => ({ cidr: `fd00:20::${i + 2}`, bound: true })),
];

function draw(r: () => number, p: number): Targets {
  const some = <T>(xs: T[]) => xs.filter(() => r() < p);
  // A duplicate target now and then: the same key, written once.
  const vips = some(VIPS);
  if (vips.length && r() < 0.3) vips.push(vips[0]!);
  // Now and then local sources of one family only: the other family's NodePort slots come when
  // it has some again, also for NodePorts already written (slotFamilies).
  const only = r();
  const localPrefixes = some(PREFIXES).filter((x) =>
    only < 0.2 ? !x.cidr.includes(':') : only < 0.3 ? x.cidr.includes(':') : true,
  );
  return { vips, nodePorts: some(NODE_PORTS), localPrefixes };
}

describe('TargetSync', () => {
  for (const maxSlots of [undefined, 40]) {
    it(`keeps the maps equal to the full layout, writing only what changed${maxSlots ? ` (${maxSlots - 1} slots)` : ''}`, () => {
      const r = rng(maxSlots ?? 11);
      const kernel = new FakeMaps();
      const sync = new TargetSync(kernel.addon, kernel.fds, maxSlots);
      let was = expected({ vips: [], nodePorts: [], localPrefixes: [] }, sync);
      const slotKeys = new Map<number, string>();
      for (let step = 0; step < 120; step++) {
        const t = draw(r, [0.9, 0.5, 0.1, 0][step % 4]!);
        kernel.writes = 0;
        sync.sync(t);
        const now = expected(t, sync);
        expect(kernel.maps, `step ${step}`).toEqual(now);
        expect(kernel.writes, `step ${step}: writes`).toBe(changes(was, now));
        was = now;
        // A slot never changes key.
        for (let s = 1; s < sync.slots.used; s++) {
          const k = sync.slots.keyOf(s).toString('hex');
          expect(slotKeys.get(s) ?? k, `slot ${s}`).toBe(k);
          slotKeys.set(s, k);
        }
      }
      expect(sync.slots.used).toBe(maxSlots ?? slotKeys.size + 1);
    });
  }

  it('after a failed write, the next sync (same or new targets) completes the maps', () => {
    const r = rng(5);
    const kernel = new FakeMaps();
    const sync = new TargetSync(kernel.addon, kernel.fds);
    const failedIn = new Set<string>();
    for (let step = 0; step < 100; step++) {
      const t = draw(r, [0.9, 0.4, 0.7][step % 3]!);
      kernel.writes = 0;
      kernel.failAt = 1 + Math.floor(r() * 60);
      try {
        sync.sync(t);
      } catch (e) {
        expect(e).toBeInstanceOf(CaptureError);
        const m = /updating the eBPF ([\w.]+) map/.exec((e as Error).message);
        expect(m, (e as Error).message).not.toBeNull();
        failedIn.add(m![1]!);
        // Half the time the same targets again, else new ones.
        const again = r() < 0.5 ? t : draw(r, 0.6);
        kernel.failAt = 0;
        sync.sync(again);
        expect(kernel.maps, `step ${step} after a failure`).toEqual(expected(again, sync));
        continue;
      }
      expect(kernel.maps, `step ${step}`).toEqual(expected(t, sync));
    }
    // Failures landed in the large maps, where the work left is tracked, not in one map only.
    for (const name of [MAP_VIPS4, MAP_VIPS6, MAP_VIPTAB, MAP_NODEPORTS]) expect(failedIn, name).toContain(name);
  });

  it('a NodePort and a VIP that go and come back get the slots they had', () => {
    const kernel = new FakeMaps();
    const sync = new TargetSync(kernel.addon, kernel.fds);
    const vip = { address: '10.0.0.100', port: 80, proto: 'tcp' as const };
    const np = { port: 30080, proto: 'udp' as const };
    const other = { address: '10.0.0.101', port: 80, proto: 'tcp' as const };
    const slotsNow = () => {
      const v = kernel.maps.get(MAP_VIPS4)!;
      const key = [...v.keys()].find((k) => k.startsWith('0a000064'))!;
      const value = Buffer.from(
        kernel.maps
          .get(MAP_NODEPORTS)!
          .get(Buffer.from(Uint32Array.of(nodePortIndex(17, 30080)).buffer).toString('hex'))!,
        'hex',
      );
      return [
        Buffer.from(v.get(key)!, 'hex').readUInt32LE(0),
        value.readUInt16LE(NODEPORT_SLOT_V4),
        value.readUInt16LE(NODEPORT_SLOT_V6),
      ];
    };
    // Local sources of both families: the NodePort gets a slot for each.
    const localPrefixes = [
      { cidr: '10.244.1.0/24', bound: false },
      { cidr: 'fd00:244::/64', bound: false },
    ];
    sync.sync({ vips: [vip], nodePorts: [np], localPrefixes });
    const first = slotsNow();
    sync.sync({ vips: [other], nodePorts: [], localPrefixes });
    expect(kernel.maps.get(MAP_VIPS4)!.size).toBe(1);
    expect(kernel.maps.get(MAP_NODEPORTS)!.size).toBe(0);
    sync.sync({ vips: [other, vip], nodePorts: [np], localPrefixes });
    expect(slotsNow()).toEqual(first);
    expect(new Set(first).size).toBe(3);
    expect(sync.slots.used).toBe(5);
  });

  it('refuses targets the program cannot take before handing out slots or writing', () => {
    const kernel = new FakeMaps();
    const sync = new TargetSync(kernel.addon, kernel.fds);
    const many = Array.from({ length: 17 }, (_, i) => ({ cidr: `10.${i}.0.0/16`, bound: false }));
    expect(() =>
      sync.sync({ vips: [{ address: '10.0.0.1', port: 80, proto: 'tcp' }], nodePorts: [], localPrefixes: many }),
    ).toThrow(/preparing the eBPF maps/);
    expect(sync.slots.used).toBe(1);
    expect(kernel.writes).toBe(0);
  });
});
