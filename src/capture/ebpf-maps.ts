// Contents of the eBPF program's maps: target sets -> map entries (kept in
// sync by diffing against what we wrote last), and counters <- per-CPU values.
import type { BpfAddon } from '../native/bpf.js';
import {
  COUNTER_KEY_SIZE,
  COUNTER_VALUE_SIZE,
  CTR_VAL_BYTES,
  CTR_VAL_PACKETS,
  configValue,
  decodeCounterKey,
  type DecodedCounterKey,
  LOCAL_BOUND,
  LOCAL_POD,
  addressWord,
  filterBit,
  FILTERS_HOST,
  nodePortBitmap,
  FILTERS_VALUE_SIZE,
  FILTERS_VIP,
  MAP_CONFIG,
  MAP_FILTERS,
  MAP_HOSTS4,
  MAP_HOSTS6,
  MAP_VIPS4,
  MAP_VIPS6,
  MAP_VIPTAB,
  MAP_NODEPORTS,
  MAX_SLOTS,
  SLOTS_SEEN_VALUE_SIZE,
  NODEPORT_SLOT_V4,
  NODEPORT_SLOT_V6,
  NODEPORT_VALUE_SIZE,
  counterKey,
  nodePortIndex,
  type Net4,
  type Net6,
  nodePortSlot,
  setBit,
  u32Value,
  vipKey,
  vipEntry,
  VIP_BUCKET_ENTRIES,
  VIP_BUCKET_MORE,
  VIP_BUCKET_SIZE,
  VIP_ENT_SIZE,
  VIPTAB_BUCKETS,
} from './bpf-layout.js';
import { address16, parsePrefix16, PROTO_NUMBERS, type CounterSample, type Targets } from './targets.js';

/**
 * key -> value, each as text (bytesText). Kept as text, not Buffers: at 5,000 Services the
 * maps hold ~15k entries, and two Buffer objects per entry cost ~5 MB of heap (bench/agent.ts).
 */
export type MapContents = Map<string, string>;

/**
 * Bytes as text, one character a byte ('latin1' maps every byte to one character and back):
 * half the length of hex, and a one-byte value is one of V8's shared one-character strings
 * (at 5,000 Services, hex text would be ~0.9 MB of the agent's heap).
 */
export const bytesText = (b: Buffer): string => b.toString('latin1');
export const textBytes = (t: string): Buffer => Buffer.from(t, 'latin1');

/**
 * Counter slots of the `slots` array, one per counter key the program counts by slot (a VIP
 * entry's to_lb, a NodePort's loop_return per family). A key keeps its slot for the life of the
 * agent, also while its target is gone, and a slot never changes key: the per-CPU sums stay
 * monotonic. When MAX_SLOTS - 1 are taken, new keys get 0 (none) and the program counts them in
 * the counters hash, as before slots.
 */
export class SlotAllocator {
  private readonly byKey = new Map<string, number>();
  /** Counter key (bytesText of a struct ctr_key) of each slot; index 0 is unused. */
  readonly keys: string[] = [''];

  constructor(private readonly max = MAX_SLOTS) {}

  slot(key: Buffer): number {
    const k = bytesText(key);
    let s = this.byKey.get(k);
    if (s !== undefined) return s;
    if (this.keys.length >= this.max) return 0;
    s = this.keys.length;
    this.keys.push(k);
    this.byKey.set(k, s);
    return s;
  }

  /** Slots handed out, slot 0 included (the part of the array the reader reads). */
  get used(): number {
    return this.keys.length;
  }
}

/**
 * Where each VIP entry sits in the program's `viptab` buckets, for the life of the agent: an
 * entry keeps its place while its key stays, because a bucket is rewritten as a whole while the
 * program may be reading it, and only the entries that change may read torn. A new key takes a
 * free entry of its bucket; when there is none it is looked up in vips4/vips6 only (the bucket's
 * `more`) and stays there while it stays.
 */
export class VipTable {
  /** Bucket -> its entries (bytesText of a struct vip_ent, '' = free) and its hash-only entries. */
  private readonly buckets = new Map<number, { entries: string[]; more: Set<string> }>();

  /** Makes the table hold exactly `wanted` (bucket -> entries) and returns the buckets in use. */
  update(wanted: Map<number, Set<string>>): MapContents {
    for (const [at, b] of this.buckets) {
      const w = wanted.get(at);
      b.entries = b.entries.map((e) => (e && w?.has(e) ? e : ''));
      for (const e of b.more) if (!w?.has(e)) b.more.delete(e);
      if (b.entries.every((e) => !e) && b.more.size === 0) this.buckets.delete(at);
    }
    for (const [at, w] of wanted) {
      let b = this.buckets.get(at);
      if (!b) this.buckets.set(at, (b = { entries: Array<string>(VIP_BUCKET_ENTRIES).fill(''), more: new Set() }));
      for (const e of w) {
        if (b.entries.includes(e) || b.more.has(e)) continue;
        const free = b.entries.indexOf('');
        if (free >= 0) b.entries[free] = e;
        else b.more.add(e);
      }
    }
    const out: MapContents = new Map();
    for (const [at, b] of this.buckets) {
      const v = Buffer.alloc(VIP_BUCKET_SIZE);
      b.entries.forEach((e, i) => e && v.set(textBytes(e), i * VIP_ENT_SIZE));
      v.writeUInt32LE(b.more.size ? 1 : 0, VIP_BUCKET_MORE);
      put(out, u32Value(at), v);
    }
    return out;
  }
}

function put(m: MapContents, key: Buffer, value: Buffer): void {
  m.set(bytesText(key), bytesText(value));
}

/**
 * The node's local prefixes as the program reads them: wider prefixes (pod
 * CIDRs) and the first host addresses in a short list compared one by one,
 * the other host addresses (/32, /128) in exact hashes. An address's flags
 * are its host entry's OR-ed with those of every prefix that holds it.
 * Duplicates merge their flags.
 */
export interface LocalSets {
  /** 4-byte address (bytesText) -> local flags. */
  hosts4: Map<string, number>;
  /** 16-byte address (bytesText) -> local flags. */
  hosts6: Map<string, number>;
  nets4: Net4[];
  nets6: Net6[];
}

function mask6(bits: number): Buffer {
  const m = Buffer.alloc(16);
  for (let i = 0; i < 16; i++) m[i] = (0xff00 >> Math.max(0, Math.min(8, bits - i * 8))) & 0xff;
  return m;
}

export function localSets(t: Targets): LocalSets {
  const out: LocalSets = { hosts4: new Map(), hosts6: new Map(), nets4: [], nets6: [] };
  const nets4 = new Map<string, Net4>();
  const nets6 = new Map<string, Net6>();
  const or = (m: Map<string, number>, k: string, f: number) => m.set(k, (m.get(k) ?? 0) | f);
  for (const lp of t.localPrefixes) {
    const p = parsePrefix16(lp.cidr);
    const flags = lp.bound ? LOCAL_BOUND : LOCAL_POD;
    const v4 = !lp.cidr.split('/')[0]!.includes(':');
    if (p.bits === 128) {
      if (v4) or(out.hosts4, bytesText(p.address.subarray(12)), flags);
      else or(out.hosts6, bytesText(p.address), flags);
    } else if (v4) {
      const bits = p.bits - 96;
      const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
      const addr = p.address.readUInt32BE(12);
      const k = `${addr}/${bits}`;
      const prev = nets4.get(k);
      nets4.set(k, { addr, mask, flags: flags | (prev?.flags ?? 0) });
    } else {
      const k = `${p.address.toString('hex')}/${p.bits}`;
      const prev = nets6.get(k);
      nets6.set(k, { addr: p.address, mask: mask6(p.bits), flags: flags | (prev?.flags ?? 0) });
    }
  }
  out.nets4 = [...nets4.values()];
  out.nets6 = [...nets6.values()];
  // The first host addresses (node IPs come before kube-ipvs0's many VIPs) are compared in
  // place too, while the list stays short: a hash lookup costs more than a few compares.
  for (const [k, flags] of out.hosts4) {
    if (out.nets4.length >= INLINE_PREFIXES) break;
    out.nets4.push({ addr: textBytes(k).readUInt32BE(0), mask: 0xffffffff, flags });
    out.hosts4.delete(k);
  }
  for (const [k, flags] of out.hosts6) {
    if (out.nets6.length >= INLINE_PREFIXES) break;
    out.nets6.push({ addr: textBytes(k), mask: Buffer.alloc(16, 0xff), flags });
    out.hosts6.delete(k);
  }
  return out;
}

/** Prefixes per family compared in place before host addresses go to the hash (see localSets). */
const INLINE_PREFIXES = 4;

/**
 * The maps the agent writes; the program only reads them. In this order: the
 * filters come after the hashes they guard, so a new key is in its hash
 * before its bit is set (a stale bit only costs a lookup).
 */
export const TARGET_MAPS = [MAP_VIPS4, MAP_VIPS6, MAP_VIPTAB, MAP_HOSTS4, MAP_HOSTS6, MAP_NODEPORTS, MAP_CONFIG, MAP_FILTERS] as const;

/** Array maps of TARGET_MAPS whose entries cannot be deleted: a key that goes is written with this value. */
export const ARRAY_ZERO: Partial<Record<string, Buffer>> = {
  [MAP_NODEPORTS]: Buffer.alloc(NODEPORT_VALUE_SIZE),
  [MAP_VIPTAB]: Buffer.alloc(VIP_BUCKET_SIZE),
};

const ANY_V4 = address16('0.0.0.0');
const ANY_V6 = Buffer.alloc(16);

/**
 * Map name -> contents, for every map of TARGET_MAPS (the config array's only key is 0). Counter
 * slots come from `slots`; without it (classify's TargetIndex, which only reads keys) every
 * slot is 0. The viptab buckets come from `table` (empty without it: the program would then
 * find no VIP, so the counter always passes one).
 */
export function targetMaps(t: Targets, slots?: SlotAllocator, table?: VipTable): Record<string, MapContents> {
  const local = localSets(t);
  const maps: Record<string, MapContents> = Object.fromEntries(TARGET_MAPS.map((m) => [m, new Map()]));
  const filters = Buffer.alloc(FILTERS_VALUE_SIZE);
  const buckets = new Map<number, Set<string>>();
  for (const v of t.vips) {
    const { v4, key } = vipKey(v.address, v.port, v.proto);
    const proto = PROTO_NUMBERS[v.proto];
    const a16 = address16(v.address);
    const slot = slots?.slot(counterKey(a16, v.port, proto, 'to_lb', 'egress')) ?? 0;
    put(maps[v4 ? MAP_VIPS4 : MAP_VIPS6]!, key, u32Value(slot));
    const bit = filterBit(addressWord(a16, v4), v.port, proto);
    setBit(filters, FILTERS_VIP, bit);
    const at = bit & (VIPTAB_BUCKETS - 1);
    if (!buckets.has(at)) buckets.set(at, new Set());
    buckets.get(at)!.add(bytesText(vipEntry(a16, v4, v.port, proto, slot)));
  }
  if (table) maps[MAP_VIPTAB] = table.update(buckets);
  for (const [hosts, v4] of [[local.hosts4, true], [local.hosts6, false]] as const) {
    for (const [k, flags] of hosts) {
      maps[v4 ? MAP_HOSTS4 : MAP_HOSTS6]!.set(k, bytesText(u32Value(flags)));
      const a = textBytes(k);
      setBit(filters, FILTERS_HOST, filterBit(v4 ? a.readUInt32LE(0) : addressWord(a, false), 0, 0));
    }
  }
  for (const n of t.nodePorts) {
    const proto = PROTO_NUMBERS[n.proto];
    setBit(filters, nodePortBitmap(proto), n.port);
    const value = Buffer.alloc(NODEPORT_VALUE_SIZE);
    if (slots) {
      value.writeUInt16LE(slots.slot(counterKey(ANY_V4, n.port, proto, 'loop_return', 'ingress')), NODEPORT_SLOT_V4);
      value.writeUInt16LE(slots.slot(counterKey(ANY_V6, n.port, proto, 'loop_return', 'ingress')), NODEPORT_SLOT_V6);
    }
    put(maps[MAP_NODEPORTS]!, u32Value(nodePortIndex(proto, n.port)), value);
  }
  put(maps[MAP_CONFIG]!, u32Value(0), configValue(local.nets4, local.nets6, { v4: local.hosts4.size > 0, v6: local.hosts6.size > 0 }));
  put(maps[MAP_FILTERS]!, u32Value(0), filters);
  return maps;
}

/**
 * Makes the map hold `next`, given that it holds `current`: new and changed
 * entries first, then deletions, so that a key present in both never
 * disappears for a moment.
 */
export function syncMap(addon: BpfAddon, fd: number, current: MapContents, next: MapContents, arrayZero?: Buffer): void {
  for (const [key, value] of next) {
    if (current.get(key) !== value) addon.bpfMapUpdate(fd, textBytes(key), textBytes(value), 0 /* BPF_ANY */);
  }
  for (const key of current.keys()) {
    if (next.has(key)) continue;
    if (arrayZero) addon.bpfMapUpdate(fd, textBytes(key), arrayZero, 0 /* BPF_ANY */);
    else addon.bpfMapDelete(fd, textBytes(key));
  }
}

/** Per-CPU values occupy one 8-byte-aligned slot per possible CPU. */
export function perCpuStride(valueSize: number): number {
  return Math.ceil(valueSize / 8) * 8;
}

/** Reads and sums the per-CPU counters map with batch lookups. */
export class CounterMapReader {
  private readonly keys: Buffer;
  private readonly values: Buffer;
  private readonly token = Buffer.alloc(8);
  private readonly status = new Int32Array(2);
  private readonly stride = perCpuStride(COUNTER_VALUE_SIZE);
  /** Decoded keys by raw bytes: keys stay the same from one read to the next. */
  private decoded = new Map<string, DecodedCounterKey>();

  constructor(
    private readonly addon: BpfAddon,
    private readonly fd: number,
    private readonly cpus: number,
    private readonly batch = 4096,
  ) {
    this.keys = Buffer.alloc(batch * COUNTER_KEY_SIZE);
    this.values = Buffer.alloc(batch * cpus * this.stride);
  }

  read(): CounterSample[] {
    const out: CounterSample[] = [];
    const seen = new Map<string, DecodedCounterKey>();
    let first = true;
    for (;;) {
      this.addon.bpfMapLookupBatch(this.fd, this.keys, this.values, this.token, first, this.status, this.batch);
      first = false;
      const n = this.status[0]!;
      for (let i = 0; i < n; i++) {
        const raw = this.keys.toString('latin1', i * COUNTER_KEY_SIZE, (i + 1) * COUNTER_KEY_SIZE);
        const key = this.decoded.get(raw) ?? decodeCounterKey(this.keys, i * COUNTER_KEY_SIZE);
        seen.set(raw, key);
        out.push({
          target: key.target,
          port: key.port,
          proto: key.proto,
          kind: key.kind,
          direction: key.direction,
          packets: this.sum(i, CTR_VAL_PACKETS),
          bytes: this.sum(i, CTR_VAL_BYTES),
        });
      }
      if (this.status[1] || n === 0) break;
    }
    this.decoded = seen;
    return out;
  }

  /** Sum over CPUs of the u64 at `field` of entry i (exact below 2^53). */
  private sum(i: number, field: number): number {
    let total = 0;
    const base = i * this.cpus * this.stride + field;
    for (let c = 0; c < this.cpus; c++) {
      const off = base + c * this.stride;
      total += this.values.readUInt32LE(off) + this.values.readUInt32LE(off + 4) * 0x1_0000_0000;
    }
    return total;
  }
}


/**
 * Reads the per-CPU `slots` array and gives each slot that counted a packet as the sample of its
 * counter key. Only the slots the program marked in `slots_seen` (bumped at least once) are read:
 * the kernel copies per-CPU values out one element at a time, and most slots stay at zero. A few
 * marked slots are looked up one by one; many, with batch lookups as far as the slots handed out
 * (a batch holds at most `batch` slots: batch x CPUs x 16 bytes, 4 MiB at 4,096 slots and 64 CPUs).
 */
export class SlotMapReader {
  private keys = Buffer.alloc(0);
  private values = Buffer.alloc(0);
  private readonly token = Buffer.alloc(8);
  private readonly status = new Int32Array(2);
  private readonly stride = perCpuStride(COUNTER_VALUE_SIZE);
  private readonly decoded: DecodedCounterKey[] = [];
  private readonly seen = Buffer.alloc(SLOTS_SEEN_VALUE_SIZE);
  private readonly key = Buffer.alloc(4);
  private readonly one: Buffer;

  constructor(
    private readonly addon: BpfAddon,
    private readonly fd: number,
    private readonly seenFd: number,
    private readonly cpus: number,
    private readonly slots: SlotAllocator,
    private readonly batch = 4096,
  ) {
    this.one = Buffer.alloc(cpus * this.stride);
  }

  read(): CounterSample[] {
    const used = this.slots.used;
    if (used <= 1) return [];
    // A slot not marked is zero on every CPU: the mark is set after the counts, and never cleared.
    if (!this.addon.bpfMapLookup(this.seenFd, this.key.fill(0), this.seen)) return this.readAll(used);
    const marked: number[] = [];
    for (let at = this.seen.indexOf(1, 1); at >= 0 && at < used; at = this.seen.indexOf(1, at + 1)) marked.push(at);
    // A lookup per slot costs about what a batch costs per slot, plus a system call.
    if (marked.length * 4 > used) return this.readAll(used);
    const out: CounterSample[] = [];
    for (const slot of marked) {
      this.key.writeUInt32LE(slot, 0);
      if (this.addon.bpfMapLookup(this.fd, this.key, this.one)) this.sample(out, slot, this.one, 0);
    }
    return out;
  }

  /** Every slot handed out, with batch lookups. */
  private readAll(used: number): CounterSample[] {
    const size = Math.min(used, this.batch);
    if (this.keys.length < size * 4) {
      this.keys = Buffer.alloc(size * 4);
      this.values = Buffer.alloc(size * this.cpus * this.stride);
    }
    const out: CounterSample[] = [];
    let first = true;
    for (let done = 0; done < used; ) {
      this.addon.bpfMapLookupBatch(this.fd, this.keys, this.values, this.token, first, this.status, Math.min(size, used - done));
      first = false;
      const n = this.status[0]!;
      for (let i = 0; i < n; i++) {
        const slot = this.keys.readUInt32LE(i * 4);
        if (slot === 0 || slot >= used) continue;
        this.sample(out, slot, this.values, i);
      }
      done += n;
      if (this.status[1] || n === 0) break;
    }
    return out;
  }

  /** The sample of `slot`, whose per-CPU values are the i-th in `values`, if it counted a packet. */
  private sample(out: CounterSample[], slot: number, values: Buffer, i: number): void {
    const packets = this.sum(values, i, CTR_VAL_PACKETS);
    if (packets === 0) return;
    const key = (this.decoded[slot] ??= decodeCounterKey(textBytes(this.slots.keys[slot]!), 0));
    out.push({ ...key, packets, bytes: this.sum(values, i, CTR_VAL_BYTES) });
  }

  private sum(values: Buffer, i: number, field: number): number {
    let total = 0;
    const base = i * this.cpus * this.stride + field;
    for (let c = 0; c < this.cpus; c++) {
      const off = base + c * this.stride;
      total += values.readUInt32LE(off) + values.readUInt32LE(off + 4) * 0x1_0000_0000;
    }
    return total;
  }
}

/**
 * The counters hash's samples and the slots' together, one sample per key. A key is counted in
 * one of the two only (one that found no free slot never gets one later); should both hold it,
 * the reading still has one sample for it, the sum.
 */
export function mergeSamples(a: CounterSample[], b: CounterSample[]): CounterSample[] {
  if (b.length === 0) return a;
  const byKey = new Map<string, CounterSample>();
  for (const s of [...a, ...b]) {
    const k = `${s.target}|${s.port}|${s.proto}|${s.kind}|${s.direction}`;
    const had = byKey.get(k);
    if (had) {
      had.packets += s.packets;
      had.bytes += s.bytes;
    } else byKey.set(k, { ...s });
  }
  return [...byKey.values()];
}
