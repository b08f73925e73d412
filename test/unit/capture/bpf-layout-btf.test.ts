// The byte layouts src/capture/bpf-layout.ts writes into and reads out of the
// eBPF program's maps, checked against the compiled program's own BTF: a change
// to a struct in native/bpf/clbprobe.bpf.c that the TypeScript side does not
// follow fails here (needs the build: npm run build).
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import * as L from '../../../src/capture/bpf-layout.js';
import { bpfObjectPath } from '../../../src/capture/ebpf.js';
import { Btf, elfSection } from '../../support/btf.js';

const BPF_MAP_TYPE_HASH = 1;
const BPF_MAP_TYPE_ARRAY = 2;
const BPF_MAP_TYPE_PERCPU_HASH = 5;
const BPF_MAP_TYPE_PERCPU_ARRAY = 6;

describe('clbprobe.bpf.o map layouts (BTF) against src/capture/bpf-layout.ts', () => {
  if (!existsSync(bpfObjectPath())) throw new Error(`${bpfObjectPath()} missing: npm run build`);
  const btf = Btf.fromObject(bpfObjectPath());
  /**
   * A global-data section the agent writes or reads as its map's one value: one variable of
   * struct `type` at offset 0, and the section (the value libbpf sizes the map by) that long.
   */
  const globalValue = (section: string, type: string, size: number) => {
    const s = btf.section(section);
    expect(s.vars.map((v) => ({ offset: v.offset, size: v.size, type: v.type.name }))).toEqual([
      { offset: 0, size, type },
    ]);
    expect(elfSection(readFileSync(bpfObjectPath()), section).length).toBe(size);
  };

  it('has the programs and maps the loader names', () => {
    expect(btf.functions()).toEqual(expect.arrayContaining([L.PROG_INGRESS, L.PROG_EGRESS]));
    for (const m of [
      L.MAP_VIPS4,
      L.MAP_VIPS6,
      L.MAP_HOSTS4,
      L.MAP_HOSTS6,
      L.MAP_COUNTERS,
      L.MAP_STATS,
      L.MAP_SLOTS,
      L.MAP_NODEPORTS,
      L.MAP_VIPTAB,
    ]) {
      expect(() => btf.map(m), m).not.toThrow();
    }
    for (const s of [L.MAP_CONFIG, L.MAP_FILTERS, L.MAP_SLOTS_SEEN]) expect(() => btf.section(s), s).not.toThrow();
  });

  it('VIP keys: size, port and protocol offsets', () => {
    const v4 = btf.map(L.MAP_VIPS4);
    expect(v4.type).toBe(BPF_MAP_TYPE_HASH);
    expect(v4.keySize).toBe(L.VIP4_KEY_SIZE);
    const k4 = btf.struct('vip4_key');
    expect(k4.members.addr).toMatchObject({ offset: 0, size: 4 });
    expect(k4.members.port).toMatchObject({ offset: L.VIP4_PORT, size: 2 });
    expect(k4.members.proto).toMatchObject({ offset: L.VIP4_PROTO, size: 1 });

    const v6 = btf.map(L.MAP_VIPS6);
    expect(v6.keySize).toBe(L.VIP6_KEY_SIZE);
    const k6 = btf.struct('vip6_key');
    expect(k6.members.addr).toMatchObject({ offset: 0, size: 16 });
    expect(k6.members.port).toMatchObject({ offset: L.VIP6_PORT, size: 2 });
    expect(k6.members.proto).toMatchObject({ offset: L.VIP6_PROTO, size: 1 });
  });

  it('host maps: address keys, local_flag values', () => {
    expect(btf.map(L.MAP_HOSTS4)).toMatchObject({
      type: BPF_MAP_TYPE_HASH,
      keySize: L.HOST4_KEY_SIZE,
      valueSize: L.HOST_VALUE_SIZE,
    });
    expect(btf.map(L.MAP_HOSTS6)).toMatchObject({
      type: BPF_MAP_TYPE_HASH,
      keySize: L.HOST6_KEY_SIZE,
      valueSize: L.HOST_VALUE_SIZE,
    });
    expect(btf.enumValues('local_flag')).toEqual({
      LOCAL_BOUND: L.LOCAL_BOUND,
      LOCAL_POD: L.LOCAL_POD,
      LOCAL_IN_HASH: L.LOCAL_IN_HASH,
    });
  });

  it('struct config: counts, prefix arrays and their entries', () => {
    globalValue(L.MAP_CONFIG, 'config', L.CONFIG_VALUE_SIZE);
    const c = btf.struct('config');
    expect(c.size).toBe(L.CONFIG_VALUE_SIZE);
    expect(c.members.n4).toMatchObject({ offset: L.CONFIG_N4, size: 4 });
    expect(c.members.n6).toMatchObject({ offset: L.CONFIG_N6, size: 4 });
    expect(c.members.hosts4).toMatchObject({ offset: L.CONFIG_HOSTS4, size: 4 });
    expect(c.members.hosts6).toMatchObject({ offset: L.CONFIG_HOSTS6, size: 4 });
    expect(c.members.v4).toMatchObject({ offset: L.CONFIG_NETS4, size: L.MAX_NETS * L.NET4_SIZE, nelems: L.MAX_NETS });
    expect(c.members.v6).toMatchObject({ offset: L.CONFIG_NETS6, size: L.MAX_NETS * L.NET6_SIZE, nelems: L.MAX_NETS });
    const n4 = btf.struct('net4');
    expect(n4.size).toBe(L.NET4_SIZE);
    expect(n4.members.addr).toMatchObject({ offset: L.NET4_ADDR, size: 4 });
    expect(n4.members.mask).toMatchObject({ offset: L.NET4_MASK, size: 4 });
    expect(n4.members.flags).toMatchObject({ offset: L.NET4_FLAGS, size: 4 });
    const n6 = btf.struct('net6');
    expect(n6.size).toBe(L.NET6_SIZE);
    expect(n6.members.addr).toMatchObject({ offset: L.NET6_ADDR, size: 16 });
    expect(n6.members.mask).toMatchObject({ offset: L.NET6_MASK, size: 16 });
    expect(n6.members.flags).toMatchObject({ offset: L.NET6_FLAGS, size: 4 });
  });

  it('struct filters: the VIP and host filters and the NodePort bitmaps', () => {
    globalValue(L.MAP_FILTERS, 'filters', L.FILTERS_VALUE_SIZE);
    const f = btf.struct('filters');
    expect(f.size).toBe(L.FILTERS_VALUE_SIZE);
    expect(f.members.vip).toMatchObject({
      offset: L.FILTERS_VIP,
      size: L.VIP_LINES * L.VIP_LINE_SIZE,
      nelems: L.VIP_LINES,
    });
    const line = btf.struct('vip_line');
    expect(line.size).toBe(L.VIP_LINE_SIZE);
    expect(line.members.addr).toMatchObject({ offset: L.VIP_LINE_ADDR, size: (2 * L.VIP_LINE_ADDRS) / 8 });
    expect(line.members.key).toMatchObject({ offset: L.VIP_LINE_KEY, size: 256 / 8 });
    expect(1 << L.VADDR_BITS).toBe(L.VIP_LINES * L.VIP_LINE_ADDRS);
    expect(f.members.host).toMatchObject({ offset: L.FILTERS_HOST, size: (1 << L.HOST_BITS) / 8 });
    expect(f.members.nodeport).toMatchObject({
      offset: L.FILTERS_NODEPORT,
      size: L.NODEPORT_SLOTS * L.NODEPORT_BYTES,
      nelems: L.NODEPORT_SLOTS,
    });
    expect(L.nodePortBitmap(6)).toBe(L.FILTERS_NODEPORT);
    expect(L.nodePortBitmap(132)).toBe(L.FILTERS_NODEPORT + 2 * L.NODEPORT_BYTES);
  });

  it('counters: key fields and per-CPU packet/byte values', () => {
    const m = btf.map(L.MAP_COUNTERS);
    expect(m).toMatchObject({
      type: BPF_MAP_TYPE_PERCPU_HASH,
      keySize: L.COUNTER_KEY_SIZE,
      valueSize: L.COUNTER_VALUE_SIZE,
    });
    const k = btf.struct('ctr_key');
    expect(k.size).toBe(L.COUNTER_KEY_SIZE);
    expect(k.members.addr).toMatchObject({ offset: L.CTR_KEY_ADDR, size: 16 });
    expect(k.members.port).toMatchObject({ offset: L.CTR_KEY_PORT, size: 2 });
    expect(k.members.proto).toMatchObject({ offset: L.CTR_KEY_PROTO, size: 1 });
    expect(k.members.kind).toMatchObject({ offset: L.CTR_KEY_KIND, size: 1 });
    expect(k.members.dir).toMatchObject({ offset: L.CTR_KEY_DIR, size: 1 });
    const v = btf.struct('ctr_val');
    expect(v.members.packets).toMatchObject({ offset: L.CTR_VAL_PACKETS, size: 8 });
    expect(v.members.bytes).toMatchObject({ offset: L.CTR_VAL_BYTES, size: 8 });
  });

  it('counter slots: per-CPU ctr_val array, VIP values and the NodePort slot array', () => {
    expect(btf.map(L.MAP_SLOTS)).toMatchObject({
      type: BPF_MAP_TYPE_PERCPU_ARRAY,
      maxEntries: L.MAX_SLOTS,
      keySize: 4,
      valueSize: L.COUNTER_VALUE_SIZE,
    });
    // The slots' marks: one array entry holding a byte per slot, read whole by the reader.
    globalValue(L.MAP_SLOTS_SEEN, 'slots_seen', L.SLOTS_SEEN_VALUE_SIZE);
    expect(btf.struct('slots_seen').members.seen).toMatchObject({ offset: 0, size: L.MAX_SLOTS });
    expect(btf.map(L.MAP_VIPS4).valueSize).toBe(L.VIP_VALUE_SIZE);
    expect(btf.map(L.MAP_VIPS6).valueSize).toBe(L.VIP_VALUE_SIZE);
    expect(btf.map(L.MAP_NODEPORTS)).toMatchObject({
      type: BPF_MAP_TYPE_ARRAY,
      maxEntries: L.NODEPORT_ENTRIES,
      keySize: 4,
      valueSize: L.NODEPORT_VALUE_SIZE,
    });
    const np = btf.struct('nodeport_slots');
    expect(np.size).toBe(L.NODEPORT_VALUE_SIZE);
    expect(np.members.v4).toMatchObject({ offset: L.NODEPORT_SLOT_V4, size: 2 });
    expect(np.members.v6).toMatchObject({ offset: L.NODEPORT_SLOT_V6, size: 2 });
    // A u16 holds every slot; the index follows filters.nodeport's protocol order.
    expect(L.MAX_SLOTS).toBeLessThanOrEqual(0xffff);
    expect(L.nodePortIndex(17, 30080)).toBe(65536 + 30080);
  });

  it('stats: u64 per CPU at the slots the reader asks for', () => {
    const m = btf.map(L.MAP_STATS);
    expect(m).toMatchObject({ type: BPF_MAP_TYPE_PERCPU_ARRAY, keySize: 4, valueSize: L.STAT_VALUE_SIZE });
    const slots = btf.enumValues('stat');
    expect(slots.STAT_COUNTERS_FULL).toBe(L.STAT_COUNTERS_FULL);
    expect(m.maxEntries).toBe(slots.STAT_MAX);
  });
});
