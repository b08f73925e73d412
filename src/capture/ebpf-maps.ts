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
  vipKeyOf,
} from './ebpf-keys.js';
import type { SlotAllocator, VipTable } from './ebpf-tables.js';
import {
  address16,
  type CounterSample,
  inPrefix,
  maskInPlace,
  PROTO_NUMBERS,
  type Prefix16,
  parsePrefix16,
  type Targets,
} from './targets.js';

/** key -> value, each as text (bytesText): text compares by value, as a Map key must. */
export type MapContents = Map<string, string>;

/** Prefixes per family compared in place before host addresses go to the hash (see localSets). */
const INLINE_PREFIXES = 4;

type LocalPrefix16 = Prefix16 & { flags: number; inHash?: boolean };

/** One family's local prefixes: host addresses (16-byte form as text) -> flags, and the prefixes compared in place. */
function familySets(t: Targets, v4: boolean): { hosts: Map<string, number>; nets: LocalPrefix16[] } {
  const hosts = new Map<string, number>();
  const prefixes = new Map<string, LocalPrefix16>();
  for (const lp of t.localPrefixes) {
    const p = parsePrefix16(lp.cidr);
    if (p.v4 !== v4) continue;
    const flags = lp.bound ? LOCAL_BOUND : LOCAL_POD;
    const k = bytesText(p.address);
    if (p.bits === 128) hosts.set(k, (hosts.get(k) ?? 0) | flags);
    else prefixes.set(`${k}/${p.bits}`, { ...p, flags: flags | (prefixes.get(`${k}/${p.bits}`)?.flags ?? 0) });
  }
  const nets = [...prefixes.values()];
  // The first host addresses (node IPs precede kube-ipvs0's VIPs) are compared in place, with the flags of
  // their prefixes, so that a packet from the node itself ends the program's search early.
  const inline: LocalPrefix16[] = [];
  for (const [k, flags] of hosts) {
    if (nets.length + inline.length >= INLINE_PREFIXES) break;
    const address = textBytes(k);
    const within = nets.filter((n) => inPrefix(address, n)).reduce((f, n) => f | n.flags, flags);
    inline.push({ address, bits: 128, v4, flags: within });
    hosts.delete(k);
  }
  const hashed = [...hosts.keys()].map(textBytes);
  for (const n of nets) n.inHash = hashed.some((a) => inPrefix(a, n));
  return { hosts, nets: [...inline, ...nets] };
}

/** The node's local prefixes as the program reads them: a short list compared in place, the rest in exact hashes. */
export function localSets(t: Targets): {
  hosts4: Map<string, number>;
  hosts6: Map<string, number>;
  nets4: Net4[];
  nets6: Net6[];
} {
  const v4 = familySets(t, true);
  const v6 = familySets(t, false);
  return {
    // hosts4 keys are the 4-byte addresses.
    hosts4: new Map([...v4.hosts].map(([k, flags]) => [k.slice(12), flags])),
    hosts6: v6.hosts,
    nets4: v4.nets.map(({ address, bits, flags, inHash }) => ({
      addr: address.readUInt32BE(12),
      mask: bits === 96 ? 0 : (0xffffffff << (128 - bits)) >>> 0,
      flags,
      inHash,
    })),
    nets6: v6.nets.map(({ address, bits, flags, inHash }) => ({
      addr: address,
      mask: maskInPlace(Buffer.alloc(16, 0xff), bits),
      flags,
      inHash,
    })),
  };
}

export const FAMILY_V4 = 1;
export const FAMILY_V6 = 2;

/**
 * Families with a non-link-local source get NodePort counter slots, since the program counts a NodePort only
 * from a source of the packet's family; a key without a slot is counted in the `counters` hash (mergeSamples).
 */
export function slotFamilies(t: Targets): number {
  let fams = 0;
  for (const lp of t.localPrefixes) {
    const { address: a, bits, v4 } = parsePrefix16(lp.cidr);
    const linkLocal = v4
      ? bits >= 96 + 16 && a[12] === 169 && a[13] === 254
      : bits >= 10 && a[0] === 0xfe && (a[1]! & 0xc0) === 0x80;
    if (!linkLocal) fams |= v4 ? FAMILY_V4 : FAMILY_V6;
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

/**
 * What the target maps must hold; slots go to VIPs in target order, then to NodePorts per slotFamilies family.
 * vips: keys in target order (a duplicate target repeats its key); nodePortFamilies: the families whose NodePort
 * keys were given slots. Throws (before handing out any slot) when the targets do not fit the program.
 */
export function wantedMaps(t: Targets, slots?: SlotAllocator) {
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
  for (const k of local.hosts4.keys()) setBit(filters, FILTERS_HOST, hostBit(textBytes(k).readUInt32LE(0)));
  for (const k of local.hosts6.keys()) setBit(filters, FILTERS_HOST, hostBit(addressWord(textBytes(k), false)));
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

const PROTO_NUMBERS_BY_SLOT = [PROTO_NUMBERS.tcp, PROTO_NUMBERS.udp, PROTO_NUMBERS.sctp];

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

/** The vips4/vips6 value of a key: its to_lb slot, 0 without slots. */
export const vipValue = (k: VipKey, slots?: SlotAllocator): Buffer => u32Value(slots?.find(vipCounterId(k)) ?? 0);

/** Map name -> contents for every TARGET_MAPS map; slots are 0 without `slots`, viptab empty without `table`. */
export function targetMaps(t: Targets, slots?: SlotAllocator, table?: VipTable): Record<string, MapContents> {
  const w = wantedMaps(t, slots);
  const maps: Record<string, MapContents> = Object.fromEntries(TARGET_MAPS.map((m) => [m, new Map()]));
  const put = (map: string, key: Buffer, value: Buffer) => maps[map]!.set(bytesText(key), bytesText(value));
  for (const k of w.vips) put(isVip4(k) ? MAP_VIPS4 : MAP_VIPS6, textBytes(k), vipValue(k, slots));
  if (table) {
    table.update(w.vips);
    const slotOf = (k: VipKey) => slots?.find(vipCounterId(k)) ?? 0;
    for (let b = 0; b < VIPTAB_BUCKETS; b++) if (table.inUse(b)) put(MAP_VIPTAB, u32Value(b), table.bucket(b, slotOf));
  }
  for (const [k, flags] of w.hosts4) put(MAP_HOSTS4, textBytes(k), u32Value(flags));
  for (const [k, flags] of w.hosts6) put(MAP_HOSTS6, textBytes(k), u32Value(flags));
  for (const i of w.nodePorts) put(MAP_NODEPORTS, u32Value(i), nodePortValue(i, slots));
  put(MAP_CONFIG, u32Value(0), w.config);
  put(MAP_FILTERS, u32Value(0), w.filters);
  return maps;
}

/** ENOTSUPP (524) is 5.10's answer for per-CPU arrays; EINVAL comes from kernels before 5.6 without the command. */
export function batchUnsupported(e: unknown): boolean {
  return isSyscallError(e) && (e.errno === 524 || e.code === 'EOPNOTSUPP' || e.code === 'EINVAL');
}

/** Per-CPU values occupy one 8-byte-aligned slot per possible CPU. */
export function perCpuStride(valueSize: number): number {
  return Math.ceil(valueSize / 8) * 8;
}

/** Counter values read with batch lookups, or one lookup per key once the kernel refused a batch lookup. */
abstract class PerCpuCounterReader {
  protected readonly token = Buffer.alloc(8);
  protected readonly status = new Int32Array(2);
  protected readonly stride = perCpuStride(COUNTER_VALUE_SIZE);
  /** Set once the kernel refused a batch lookup (kernels before 5.6 have none for hashes, 5.10 for per-CPU arrays). */
  private batchless = false;

  constructor(
    protected readonly addon: BpfAddon,
    protected readonly fd: number,
    protected readonly cpus: number,
  ) {}

  protected readBatchesOrByKey(batches: () => CounterSample[], byKey: () => CounterSample[]): CounterSample[] {
    if (!this.batchless) {
      try {
        return batches();
      } catch (e) {
        if (!batchUnsupported(e)) throw e;
        this.batchless = true;
      }
    }
    return byKey();
  }

  /** Sum over CPUs of the u64 at `field` of the i-th per-CPU value in `values` (exact below 2^53). */
  protected sum(values: Buffer, i: number, field: number): number {
    let total = 0;
    const base = i * this.cpus * this.stride + field;
    for (let c = 0; c < this.cpus; c++) {
      const off = base + c * this.stride;
      total += values.readUInt32LE(off) + values.readUInt32LE(off + 4) * 0x1_0000_0000;
    }
    return total;
  }
}

type CounterKey = ReturnType<typeof decodeCounterKey>;

/** Sums the per-CPU counters hash with batch lookups whose buffers grow only while batches come back full. */
export class CounterMapReader extends PerCpuCounterReader {
  private keys: Buffer;
  private values: Buffer;
  private size: number;
  /** Decoded keys by raw bytes: keys stay the same from one read to the next. */
  private decoded = new Map<string, CounterKey>();

  constructor(
    addon: BpfAddon,
    fd: number,
    cpus: number,
    private readonly batch = 4096,
    first = 128,
  ) {
    super(addon, fd, cpus);
    this.size = Math.min(first, batch);
    this.keys = Buffer.alloc(this.size * COUNTER_KEY_SIZE);
    this.values = Buffer.alloc(this.size * cpus * this.stride);
  }

  get batchSize(): number {
    return this.size;
  }

  read(): CounterSample[] {
    return this.readBatchesOrByKey(
      () => this.readBatches(),
      () => this.readByKey(),
    );
  }

  /** One lookup per key, walking the keys; for kernels without batch lookups of hashes (before 5.6). */
  private readByKey(): CounterSample[] {
    const out: CounterSample[] = [];
    const seen = new Map<string, CounterKey>();
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
      if (this.addon.bpfMapLookup(this.fd, key, value)) this.sample(out, seen, key, value, 0);
    }
    this.decoded = seen;
    return out;
  }

  private readBatches(): CounterSample[] {
    const out: CounterSample[] = [];
    const seen = new Map<string, CounterKey>();
    for (let first = true; ; first = false) {
      this.addon.bpfMapLookupBatch(this.fd, this.keys, this.values, this.token, first, this.status, this.size);
      const n = this.status[0]!;
      for (let i = 0; i < n; i++) this.sample(out, seen, this.keys, this.values, i);
      if (this.status[1] || n === 0) break;
      // More to come after a full batch: larger batches from now on (the token keeps the place).
      if (n >= this.size && this.size < this.batch) {
        this.size = Math.min(this.batch, this.size * 4);
        this.keys = Buffer.alloc(this.size * COUNTER_KEY_SIZE);
        this.values = Buffer.alloc(this.size * this.cpus * this.stride);
      }
    }
    this.decoded = seen;
    return out;
  }

  /** Adds the i-th key of `keys` with its value in `values` to `out`, and its decoded key to `seen`. */
  private sample(out: CounterSample[], seen: Map<string, CounterKey>, keys: Buffer, values: Buffer, i: number): void {
    const raw = keys.toString('latin1', i * COUNTER_KEY_SIZE, (i + 1) * COUNTER_KEY_SIZE);
    const key = this.decoded.get(raw) ?? decodeCounterKey(keys, i * COUNTER_KEY_SIZE);
    seen.set(raw, key);
    out.push({
      target: key.target,
      port: key.port,
      proto: key.proto,
      kind: key.kind,
      direction: key.direction,
      packets: this.sum(values, i, CTR_VAL_PACKETS),
      bytes: this.sum(values, i, CTR_VAL_BYTES),
    });
  }
}

/**
 * Reads only the slots the program marked in `slots_seen`, because the kernel copies per-CPU values one
 * element at a time; many marked slots are read with batch lookups.
 */
export class SlotMapReader extends PerCpuCounterReader {
  private keys = Buffer.alloc(0);
  private values = Buffer.alloc(0);
  private readonly decoded: CounterKey[] = [];
  private readonly seen = Buffer.alloc(SLOTS_SEEN_VALUE_SIZE);
  private readonly key = Buffer.alloc(4);
  private readonly one: Buffer;

  constructor(
    addon: BpfAddon,
    fd: number,
    private readonly seenFd: number,
    cpus: number,
    private readonly slots: SlotAllocator,
    private readonly batch = 4096,
  ) {
    super(addon, fd, cpus);
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
    return this.readEach(marked);
  }

  /** Every slot handed out: with batch lookups, or one lookup per slot where the kernel has none for per-CPU arrays. */
  private readAll(used: number): CounterSample[] {
    return this.readBatchesOrByKey(
      () => this.readBatches(used),
      () => this.readEach(Array.from({ length: used - 1 }, (_, i) => i + 1)),
    );
  }

  private readEach(slots: number[]): CounterSample[] {
    const out: CounterSample[] = [];
    for (const slot of slots) {
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
    for (let done = 0, first = true; done < used; first = false) {
      const max = Math.min(size, used - done);
      this.addon.bpfMapLookupBatch(this.fd, this.keys, this.values, this.token, first, this.status, max);
      const n = this.status[0]!;
      for (let i = 0; i < n; i++) {
        const slot = this.keys.readUInt32LE(i * 4);
        if (slot !== 0 && slot < used) this.sample(out, slot, this.values, i);
      }
      done += n;
      if (this.status[1] || n === 0) break;
    }
    return out;
  }

  private sample(out: CounterSample[], slot: number, values: Buffer, i: number): void {
    const packets = this.sum(values, i, CTR_VAL_PACKETS);
    if (packets === 0) return;
    const key = this.decoded[slot] ?? decodeCounterKey(this.slots.keyOf(slot), 0);
    this.decoded[slot] = key;
    out.push({ ...key, packets, bytes: this.sum(values, i, CTR_VAL_BYTES) });
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
