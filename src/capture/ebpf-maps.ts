// Contents of the eBPF program's maps: target sets -> map entries (ebpf-sync.ts writes the changes),
// and per-CPU counter values -> samples.
import { isSyscallError } from '../native/addon.js';
import type { BpfAddon } from '../native/bpf.js';
import {
  addressWord,
  COUNTER_KEY_SIZE,
  COUNTER_VALUE_SIZE,
  CTR_VAL_BYTES,
  CTR_VAL_PACKETS,
  configValue,
  type DecodedCounterKey,
  decodeCounterKey,
  FILTERS_HOST,
  FILTERS_VALUE_SIZE,
  hostBit,
  LOCAL_BOUND,
  LOCAL_POD,
  MAP_CONFIG,
  MAP_FILTERS,
  MAP_HOSTS4,
  MAP_HOSTS6,
  MAP_NODEPORTS,
  MAP_VIPS4,
  MAP_VIPS6,
  MAP_VIPTAB,
  type Net4,
  type Net6,
  NODEPORT_SLOT_V4,
  NODEPORT_SLOT_V6,
  NODEPORT_VALUE_SIZE,
  nodePortBitmap,
  nodePortIndex,
  SLOTS_SEEN_VALUE_SIZE,
  setBit,
  u32Value,
  VIP_BUCKET_SIZE,
  VIPTAB_BUCKETS,
} from './bpf-layout.js';
import {
  bytesText,
  isVip4,
  nodePortCounterId,
  setVipKeyBits,
  textBytes,
  type VipKey,
  vipCounterId,
  vipKeyBytes,
  vipKeyOf,
} from './ebpf-keys.js';
import type { SlotAllocator, VipTable } from './ebpf-tables.js';
import { address16, type CounterSample, PROTO_NUMBERS, parsePrefix16, type Targets } from './targets.js';

export { bytesText, textBytes };

/** key -> value, each as text (bytesText): text compares by value, as a Map key must. */
export type MapContents = Map<string, string>;

/** The node's local prefixes as the program reads them: a short list compared in place, the rest in exact hashes. */
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
  const prefixes4 = [...nets4.values()];
  const prefixes6 = [...nets6.values()];
  // The first host addresses (node IPs precede kube-ipvs0's VIPs) are compared in place, with the flags of
  // their prefixes, so that a packet from the node itself ends the program's search early.
  const hosts4: Net4[] = [];
  for (const [k, flags] of out.hosts4) {
    if (prefixes4.length + hosts4.length >= INLINE_PREFIXES) break;
    const addr = textBytes(k).readUInt32BE(0);
    const within = prefixes4.filter((n) => (addr & n.mask) >>> 0 === n.addr).reduce((f, n) => f | n.flags, 0);
    hosts4.push({ addr, mask: 0xffffffff, flags: flags | within });
    out.hosts4.delete(k);
  }
  const hosts6: Net6[] = [];
  for (const [k, flags] of out.hosts6) {
    if (prefixes6.length + hosts6.length >= INLINE_PREFIXES) break;
    const addr = textBytes(k);
    const within = prefixes6
      .filter((n) => addr.every((b, i) => (b & n.mask[i]!) === n.addr[i]))
      .reduce((f, n) => f | n.flags, 0);
    hosts6.push({ addr, mask: Buffer.alloc(16, 0xff), flags: flags | within });
    out.hosts6.delete(k);
  }
  const hashed4 = [...out.hosts4.keys()].map((k) => textBytes(k).readUInt32BE(0));
  const hashed6 = [...out.hosts6.keys()].map(textBytes);
  for (const n of prefixes4) n.inHash = hashed4.some((a) => (a & n.mask) >>> 0 === n.addr);
  for (const n of prefixes6) n.inHash = hashed6.some((a) => a.every((b, i) => (b & n.mask[i]!) === n.addr[i]));
  out.nets4 = [...hosts4, ...prefixes4];
  out.nets6 = [...hosts6, ...prefixes6];
  return out;
}

/** Prefixes per family compared in place before host addresses go to the hash (see localSets). */
const INLINE_PREFIXES = 4;

export const FAMILY_V4 = 1;
export const FAMILY_V6 = 2;

/**
 * Families with a non-link-local source get NodePort counter slots, since the program counts a NodePort only
 * from a source of the packet's family; a key without a slot is counted in the `counters` hash (mergeSamples).
 */
export function slotFamilies(t: Targets): number {
  let fams = 0;
  for (const lp of t.localPrefixes) {
    const v4 = !lp.cidr.split('/')[0]!.includes(':');
    const fam = v4 ? FAMILY_V4 : FAMILY_V6;
    if (fams & fam) continue;
    const { address: a, bits } = parsePrefix16(lp.cidr);
    const linkLocal = v4
      ? bits >= 96 + 16 && a[12] === 169 && a[13] === 254
      : bits >= 10 && a[0] === 0xfe && (a[1]! & 0xc0) === 0x80;
    if (!linkLocal) fams |= fam;
  }
  return fams;
}

/** The maps the agent writes; filters come after the hashes they guard, so a key is in its hash before its bit. */
export const TARGET_MAPS = [
  MAP_VIPS4,
  MAP_VIPS6,
  MAP_VIPTAB,
  MAP_HOSTS4,
  MAP_HOSTS6,
  MAP_NODEPORTS,
  MAP_CONFIG,
  MAP_FILTERS,
] as const;
export type TargetMap = (typeof TARGET_MAPS)[number];

/** Array maps of TARGET_MAPS whose entries cannot be deleted: a key that goes is written with this value. */
export const ARRAY_ZERO: Partial<Record<string, Buffer>> = {
  [MAP_NODEPORTS]: Buffer.alloc(NODEPORT_VALUE_SIZE),
  [MAP_VIPTAB]: Buffer.alloc(VIP_BUCKET_SIZE),
};

/** What the target maps must hold; slots go to VIPs in target order, then to NodePorts per slotFamilies family. */
export interface WantedMaps {
  /** vips4/vips6 keys in target order (a duplicate target repeats its key). */
  vips: VipKey[];
  nodePorts: number[];
  /** The families (slotFamilies) whose NodePort keys were given slots (when slots were passed). */
  nodePortFamilies: number;
  hosts4: Map<string, number>;
  hosts6: Map<string, number>;
  config: Buffer;
  filters: Buffer;
}

/** Throws (before handing out any slot) when the targets do not fit the program (too many local prefixes). */
export function wantedMaps(t: Targets, slots?: SlotAllocator): WantedMaps {
  const local = localSets(t);
  const config = configValue(local.nets4, local.nets6, { v4: local.hosts4.size > 0, v6: local.hosts6.size > 0 });
  const filters = Buffer.alloc(FILTERS_VALUE_SIZE);
  const vips: VipKey[] = [];
  for (const v of t.vips) {
    const k = vipKeyOf(address16(v.address), !v.address.includes(':'), v.port, PROTO_NUMBERS[v.proto]);
    slots?.slotOf(vipCounterId(k));
    setVipKeyBits(filters, k);
    vips.push(k);
  }
  for (const [hosts, v4] of [
    [local.hosts4, true],
    [local.hosts6, false],
  ] as const) {
    for (const k of hosts.keys()) {
      const a = textBytes(k);
      setBit(filters, FILTERS_HOST, hostBit(v4 ? a.readUInt32LE(0) : addressWord(a, false)));
    }
  }
  const nodePorts: number[] = [];
  const fams = slotFamilies(t);
  for (const n of t.nodePorts) {
    const proto = PROTO_NUMBERS[n.proto];
    setBit(filters, nodePortBitmap(proto), n.port);
    if (fams & FAMILY_V4) slots?.slotOf(nodePortCounterId(n.port, proto, false));
    if (fams & FAMILY_V6) slots?.slotOf(nodePortCounterId(n.port, proto, true));
    nodePorts.push(nodePortIndex(proto, n.port));
  }
  return { vips, nodePorts, nodePortFamilies: fams, hosts4: local.hosts4, hosts6: local.hosts6, config, filters };
}

/** The nodeports value at `index`: loop_return slots per family, 0 where none is handed out. */
export function nodePortValue(index: number, slots?: SlotAllocator): Buffer {
  const value = Buffer.alloc(NODEPORT_VALUE_SIZE);
  if (slots) {
    const proto = PROTO_NUMBERS_BY_SLOT[Math.floor(index / 65536)]!;
    value.writeUInt16LE(slots.find(nodePortCounterId(index % 65536, proto, false)), NODEPORT_SLOT_V4);
    value.writeUInt16LE(slots.find(nodePortCounterId(index % 65536, proto, true)), NODEPORT_SLOT_V6);
  }
  return value;
}

const PROTO_NUMBERS_BY_SLOT = [PROTO_NUMBERS.tcp, PROTO_NUMBERS.udp, PROTO_NUMBERS.sctp];

/** The vips4/vips6 value of a key: its to_lb slot, 0 without slots. */
export const vipValue = (k: VipKey, slots?: SlotAllocator): Buffer => u32Value(slots?.find(vipCounterId(k)) ?? 0);

/** Map name -> contents for every TARGET_MAPS map; slots are 0 without `slots`, viptab empty without `table`. */
export function targetMaps(t: Targets, slots?: SlotAllocator, table?: VipTable): Record<string, MapContents> {
  const w = wantedMaps(t, slots);
  const maps: Record<string, MapContents> = Object.fromEntries(TARGET_MAPS.map((m) => [m, new Map()]));
  for (const k of w.vips) put(maps[isVip4(k) ? MAP_VIPS4 : MAP_VIPS6]!, vipKeyBytes(k), vipValue(k, slots));
  if (table) {
    table.update(w.vips);
    const slotOf = (k: VipKey) => slots?.find(vipCounterId(k)) ?? 0;
    for (let b = 0; b < VIPTAB_BUCKETS; b++)
      if (table.inUse(b)) put(maps[MAP_VIPTAB]!, u32Value(b), table.bucket(b, slotOf));
  }
  for (const [k, flags] of w.hosts4) maps[MAP_HOSTS4]!.set(k, bytesText(u32Value(flags)));
  for (const [k, flags] of w.hosts6) maps[MAP_HOSTS6]!.set(k, bytesText(u32Value(flags)));
  for (const i of w.nodePorts) put(maps[MAP_NODEPORTS]!, u32Value(i), nodePortValue(i, slots));
  put(maps[MAP_CONFIG]!, u32Value(0), w.config);
  put(maps[MAP_FILTERS]!, u32Value(0), w.filters);
  return maps;
}

function put(m: MapContents, key: Buffer, value: Buffer): void {
  m.set(bytesText(key), bytesText(value));
}

/** Writes new and changed entries before deletions, so a key present in both never disappears. */
export function syncMap(
  addon: BpfAddon,
  fd: number,
  current: MapContents,
  next: MapContents,
  arrayZero?: Buffer,
): void {
  for (const [key, value] of next) {
    if (current.get(key) !== value) addon.bpfMapUpdate(fd, textBytes(key), textBytes(value), 0 /* BPF_ANY */);
  }
  for (const key of current.keys()) {
    if (next.has(key)) continue;
    if (arrayZero) addon.bpfMapUpdate(fd, textBytes(key), arrayZero, 0 /* BPF_ANY */);
    else addon.bpfMapDelete(fd, textBytes(key));
  }
}

/** ENOTSUPP (524) is 5.10's answer for per-CPU arrays; EINVAL comes from kernels before 5.6 without the command. */
export function batchUnsupported(e: unknown): boolean {
  return isSyscallError(e) && (e.errno === 524 || e.code === 'EOPNOTSUPP' || e.code === 'EINVAL');
}

/** Sum over CPUs of the u64 at `field` of the i-th per-CPU value in `values` (exact below 2^53). */
function sumPerCpu(values: Buffer, i: number, cpus: number, stride: number, field: number): number {
  let total = 0;
  const base = i * cpus * stride + field;
  for (let c = 0; c < cpus; c++) {
    const off = base + c * stride;
    total += values.readUInt32LE(off) + values.readUInt32LE(off + 4) * 0x1_0000_0000;
  }
  return total;
}

/** Per-CPU values occupy one 8-byte-aligned slot per possible CPU. */
export function perCpuStride(valueSize: number): number {
  return Math.ceil(valueSize / 8) * 8;
}

/** Sums the per-CPU counters hash with batch lookups whose buffers grow only while batches come back full. */
export class CounterMapReader {
  private keys: Buffer;
  private values: Buffer;
  private size: number;
  private readonly token = Buffer.alloc(8);
  private readonly status = new Int32Array(2);
  private readonly stride = perCpuStride(COUNTER_VALUE_SIZE);
  /** Decoded keys by raw bytes: keys stay the same from one read to the next. */
  private decoded = new Map<string, DecodedCounterKey>();
  /** Set once the kernel refused a batch lookup (kernels before 5.6 have none). */
  private batchless = false;

  constructor(
    private readonly addon: BpfAddon,
    private readonly fd: number,
    private readonly cpus: number,
    private readonly batch = 4096,
    first = 128,
  ) {
    this.size = Math.min(first, batch);
    this.keys = Buffer.alloc(this.size * COUNTER_KEY_SIZE);
    this.values = Buffer.alloc(this.size * cpus * this.stride);
  }

  get batchSize(): number {
    return this.size;
  }

  read(): CounterSample[] {
    if (!this.batchless) {
      try {
        return this.readBatches();
      } catch (e) {
        if (!batchUnsupported(e)) throw e;
        this.batchless = true;
      }
    }
    return this.readByKey();
  }

  /** One lookup per key, walking the keys; for kernels without batch lookups of hashes (before 5.6). */
  private readByKey(): CounterSample[] {
    const out: CounterSample[] = [];
    const seen = new Map<string, DecodedCounterKey>();
    const key = Buffer.alloc(COUNTER_KEY_SIZE);
    const next = Buffer.alloc(COUNTER_KEY_SIZE);
    const value = Buffer.alloc(this.cpus * this.stride);
    for (
      let more = this.addon.bpfMapGetNextKey(this.fd, null, next);
      more;
      more = this.addon.bpfMapGetNextKey(this.fd, key, next)
    ) {
      next.copy(key);
      // A key deleted between the walk and the lookup has nothing left to count.
      if (!this.addon.bpfMapLookup(this.fd, key, value)) continue;
      const raw = key.toString('latin1');
      const k = this.decoded.get(raw) ?? decodeCounterKey(key, 0);
      seen.set(raw, k);
      out.push({
        ...k,
        packets: sumPerCpu(value, 0, this.cpus, this.stride, CTR_VAL_PACKETS),
        bytes: sumPerCpu(value, 0, this.cpus, this.stride, CTR_VAL_BYTES),
      });
    }
    this.decoded = seen;
    return out;
  }

  private readBatches(): CounterSample[] {
    const out: CounterSample[] = [];
    const seen = new Map<string, DecodedCounterKey>();
    let first = true;
    for (;;) {
      this.addon.bpfMapLookupBatch(this.fd, this.keys, this.values, this.token, first, this.status, this.size);
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
      // More to come after a full batch: larger batches from now on (the token keeps the place).
      if (n >= this.size && this.size < this.batch) this.grow(Math.min(this.batch, this.size * 4));
    }
    this.decoded = seen;
    return out;
  }

  private grow(size: number): void {
    this.size = size;
    this.keys = Buffer.alloc(size * COUNTER_KEY_SIZE);
    this.values = Buffer.alloc(size * this.cpus * this.stride);
  }

  private sum(i: number, field: number): number {
    return sumPerCpu(this.values, i, this.cpus, this.stride, field);
  }
}

/**
 * Reads only the slots the program marked in `slots_seen`, because the kernel copies per-CPU values one
 * element at a time; many marked slots are read with batch lookups.
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
  /** Set once the kernel refused a batch lookup of the slots (5.10: no batch ops on per-CPU arrays). */
  private batchless = false;

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
    if (marked.length * 4 > used) return this.readAll(used);
    const out: CounterSample[] = [];
    for (const slot of marked) {
      this.key.writeUInt32LE(slot, 0);
      if (this.addon.bpfMapLookup(this.fd, this.key, this.one)) this.sample(out, slot, this.one, 0);
    }
    return out;
  }

  /** Every slot handed out: with batch lookups, or one lookup per slot where the kernel has none for per-CPU arrays. */
  private readAll(used: number): CounterSample[] {
    if (!this.batchless) {
      try {
        return this.readBatches(used);
      } catch (e) {
        if (!batchUnsupported(e)) throw e;
        this.batchless = true;
      }
    }
    const out: CounterSample[] = [];
    for (let slot = 1; slot < used; slot++) {
      this.key.writeUInt32LE(slot, 0);
      if (this.addon.bpfMapLookup(this.fd, this.key, this.one)) this.sample(out, slot, this.one, 0);
    }
    return out;
  }

  private readBatches(used: number): CounterSample[] {
    const size = Math.min(used, this.batch);
    if (this.keys.length < size * 4) {
      this.keys = Buffer.alloc(size * 4);
      this.values = Buffer.alloc(size * this.cpus * this.stride);
    }
    const out: CounterSample[] = [];
    let first = true;
    for (let done = 0; done < used; ) {
      this.addon.bpfMapLookupBatch(
        this.fd,
        this.keys,
        this.values,
        this.token,
        first,
        this.status,
        Math.min(size, used - done),
      );
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

  private sample(out: CounterSample[], slot: number, values: Buffer, i: number): void {
    const packets = this.sum(values, i, CTR_VAL_PACKETS);
    if (packets === 0) return;
    const key = (this.decoded[slot] ??= decodeCounterKey(this.slots.keyOf(slot), 0));
    out.push({ ...key, packets, bytes: this.sum(values, i, CTR_VAL_BYTES) });
  }

  private sum(values: Buffer, i: number, field: number): number {
    return sumPerCpu(values, i, this.cpus, this.stride, field);
  }
}

/** One sample per key: a NodePort key may be counted in both the hash and, once it gets a slot, its slot. */
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
