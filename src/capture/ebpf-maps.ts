// What the eBPF program's target maps hold (TARGET_MAPS, derived from the targets), the counter slots and
// viptab places the agent hands out for the program's life, and TargetSync, which writes only what changed.
import type { BpfAddon } from '../native/bpf.js';
import {
  addressWord,
  type CounterId,
  configValue,
  counterIdOf,
  FILTERS_HOST,
  FILTERS_VALUE_SIZE,
  hostBit,
  isVip4,
  MAP_CONFIG,
  MAP_FILTERS,
  MAP_HOSTS4,
  MAP_HOSTS6,
  MAP_NODEPORTS,
  MAP_VIPS4,
  MAP_VIPS6,
  MAP_VIPTAB,
  MAX_SLOTS,
  NODEPORT_SLOT_V4,
  NODEPORT_SLOT_V6,
  NODEPORT_VALUE_SIZE,
  nodePortBitmap,
  nodePortCounterId,
  nodePortIndex,
  setBit,
  setVipBits,
  textBytes,
  u32Value,
  VIP_BUCKET_ENTRIES,
  VIP_BUCKET_MORE,
  VIP_BUCKET_SIZE,
  VIP_ENT_SIZE,
  VIPTAB_BUCKETS,
  type Vip,
  type VipKey,
  vipEntryOf,
  vipOf,
} from './bpf-layout.js';
import { type LocalPrefix, localFamily } from './classify.js';
import { step } from './errors.js';
import { address16, inPrefix, maskInPlace, PROTO_NUMBERS, parsePrefix16, type Targets } from './targets.js';

/** Prefixes per family compared in place before host addresses go to the hash (see localSets). */
const INLINE_PREFIXES = 4;

type LocalPrefix16 = LocalPrefix & { inHash?: boolean };

/** One family's local prefixes: host addresses (16-byte form as text) -> flags, and the prefixes compared in place. */
function familySets(t: Targets, v4: boolean): { hosts: Map<string, number>; nets: LocalPrefix16[] } {
  const { hosts, nets } = localFamily(t, v4);
  // The first host addresses (node IPs come first) are compared in place: a packet from the node ends the search early.
  const inline: LocalPrefix16[] = [];
  for (const [k, flags] of hosts) {
    if (nets.length + inline.length >= INLINE_PREFIXES) break;
    const address = textBytes(k);
    const within = nets.filter((n) => inPrefix(address, n)).reduce((f, n) => f | n.flags, flags);
    inline.push({ address, bits: 128, v4, flags: within });
    hosts.delete(k);
  }
  const hashed = [...hosts.keys()].map(textBytes);
  return { hosts, nets: [...inline, ...nets.map((n) => ({ ...n, inHash: hashed.some((a) => inPrefix(a, n)) }))] };
}

/** The node's local prefixes as the program reads them: a short list compared in place, the rest in exact hashes. */
export function localSets(t: Targets) {
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

const LINK_LOCAL = [parsePrefix16('169.254.0.0/16'), parsePrefix16('fe80::/10')];

export const FAMILY_V4 = 1;
export const FAMILY_V6 = 2;

/** Families with a non-link-local source get NodePort slots: the program counts a NodePort from its family only. */
export function slotFamilies(t: Targets): number {
  let fams = 0;
  for (const lp of t.localPrefixes) {
    const p = parsePrefix16(lp.cidr);
    const linkLocal = LINK_LOCAL.some((ll) => ll.v4 === p.v4 && p.bits >= ll.bits && inPrefix(p.address, ll));
    if (!linkLocal) fams |= p.v4 ? FAMILY_V4 : FAMILY_V6;
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
 * vips: in target order (a duplicate target repeats its key); nodePorts: index -> u32 value (0: no slot yet).
 * Throws (before handing out any slot) when the targets do not fit the program.
 */
export function wantedMaps(t: Targets, slots: SlotAllocator) {
  const local = localSets(t);
  const config = configValue(local.nets4, local.nets6, { v4: local.hosts4.size > 0, v6: local.hosts6.size > 0 });
  const filters = Buffer.alloc(FILTERS_VALUE_SIZE);
  const vips: Vip[] = [];
  for (const { address, port, proto } of t.vips) {
    const addr16 = address16(address);
    const v4 = !address.includes(':');
    const vip = vipOf(addr16, v4, port, PROTO_NUMBERS[proto]);
    slots.slotOf(vip.counterId);
    setVipBits(filters, addressWord(addr16, v4), port, PROTO_NUMBERS[proto]);
    vips.push(vip);
  }
  for (const k of local.hosts4.keys()) setBit(filters, FILTERS_HOST, hostBit(textBytes(k).readUInt32LE(0)));
  for (const k of local.hosts6.keys()) setBit(filters, FILTERS_HOST, hostBit(addressWord(textBytes(k), false)));
  const nodePorts = new Map<number, number>();
  const fams = slotFamilies(t);
  for (const n of t.nodePorts) {
    const proto = PROTO_NUMBERS[n.proto];
    setBit(filters, nodePortBitmap(proto), n.port);
    let value = 0;
    for (const [family, v6, at] of NODEPORT_FAMILIES) {
      const id = nodePortCounterId(n.port, proto, v6);
      // A family without a source now keeps the slot it had, if any; the u16 at byte `at` of the u32 value.
      value |= (fams & family ? slots.slotOf(id) : slots.find(id)) << (8 * at);
    }
    nodePorts.set(nodePortIndex(proto, n.port), value >>> 0);
  }
  return { vips, nodePorts, hosts4: local.hosts4, hosts6: local.hosts6, config, filters };
}

const NODEPORT_FAMILIES = [
  [FAMILY_V4, false, NODEPORT_SLOT_V4],
  [FAMILY_V6, true, NODEPORT_SLOT_V6],
] as const;

/**
 * Counter slots of the `slots` array: a key keeps its slot for the agent's life and a slot never changes key,
 * so per-CPU sums stay monotonic; past MAX_SLOTS - 1 new keys get 0 and are counted in the counters hash.
 */
export class SlotAllocator {
  private readonly slotById = new Map<CounterId, number>();
  /** Position p: the counter id of slot p + 1. */
  private readonly idBySlot: CounterId[] = [];

  constructor(private readonly max = MAX_SLOTS) {}

  /** The slot of a struct ctr_key, handed out now if it has none and one is left; 0 when none is. */
  slot(key: Uint8Array): number {
    return this.slotOf(counterIdOf(key));
  }

  slotOf(id: CounterId): number {
    const had = this.find(id);
    if (had !== 0 || this.used >= this.max) return had;
    const slot = this.used;
    this.slotById.set(id, slot);
    this.idBySlot.push(id);
    return slot;
  }

  /** The slot `id` has, 0 if none (none is handed out). */
  find(id: CounterId): number {
    return this.slotById.get(id) ?? 0;
  }

  /** The struct ctr_key slot `slot` counts. */
  keyOf(slot: number): Buffer {
    if (!Number.isInteger(slot) || slot < 1 || slot >= this.used)
      throw new RangeError(`slot ${slot} was not handed out`);
    return textBytes(this.idBySlot[slot - 1]!);
  }

  /** Slots handed out, slot 0 included (the part of the array the reader reads). */
  get used(): number {
    return this.idBySlot.length + 1;
  }
}

/**
 * Where each VIP entry sits in `viptab`: an entry keeps its place while its key stays, because the program may
 * read a bucket while it is rewritten; a key finding no free entry is looked up in vips4/vips6 (`more`).
 */
export class VipTable {
  /** Entry i of bucket b at b * VIP_BUCKET_ENTRIES + i, undefined when free. Allocated with the first key. */
  private entries: (Vip | undefined)[] = [];
  private readonly more = new Map<VipKey, Vip>();
  /** Per bucket with any, how many of `more` are its. */
  private readonly moreCount = new Map<number, number>();

  /**
   * Makes the table hold exactly the keys of `wanted` (duplicates are one key) and says what changed; buckets:
   * those whose value changed (an entry taken or freed, `more` set or cleared), each once.
   */
  update(wanted: Iterable<Vip>): { added: Vip[]; removed: Vip[]; buckets: number[] } {
    const change = { added: [] as Vip[], removed: [] as Vip[], buckets: [] as number[] };
    if (this.entries.length === 0) this.entries = new Array(VIPTAB_BUCKETS * VIP_BUCKET_ENTRIES).fill(undefined);
    // Buckets touched -> their value before, so a `more` key replaced by another leaves the bucket unwritten.
    const before = new Map<number, string>();
    const touch = (b: number) => {
      if (!before.has(b)) before.set(b, this.signature(b));
    };
    // Keys staying are marked, new ones kept for after the frees: a freed entry goes to a new key of its bucket.
    const stays = new Set<number>();
    const moreStays = new Set<VipKey>();
    const fresh: Vip[] = [];
    for (const v of wanted) {
      const at = this.entryOf(v.bucket, v.key);
      if (at >= 0) stays.add(at);
      else if (this.more.has(v.key)) moreStays.add(v.key);
      else fresh.push(v);
    }
    this.entries.forEach((v, at) => {
      if (v === undefined || stays.has(at)) return;
      change.removed.push(v);
      touch(v.bucket);
      this.entries[at] = undefined;
    });
    for (const [k, v] of this.more) {
      if (moreStays.has(k)) continue;
      change.removed.push(v);
      this.more.delete(k);
      touch(v.bucket);
      this.countMore(v.bucket, -1);
    }
    for (const v of fresh) {
      if (this.has(v.key, v.bucket)) continue; // a duplicate of one placed just now
      change.added.push(v);
      touch(v.bucket);
      const free = this.entryOf(v.bucket, undefined);
      if (free >= 0) this.entries[free] = v;
      else {
        this.more.set(v.key, v);
        this.countMore(v.bucket, 1);
      }
    }
    for (const [b, was] of before) if (this.signature(b) !== was) change.buckets.push(b);
    return change;
  }

  /** What bucket b's value is made of: its entries' keys (their slots follow from them) and `more`. */
  private signature(b: number): string {
    let s = this.moreCount.has(b) ? 'more' : '';
    for (const v of this.bucketEntries(b)) s += `|${v?.key ?? ''}`;
    return s;
  }

  /** Whether the table holds key k, whose bucket is b. */
  has(k: VipKey, b: number): boolean {
    return this.more.has(k) || this.entryOf(b, k) >= 0;
  }

  /** Keys in the table, for tests: in a bucket's entries, and looked up in the hash only. */
  counts(): { inBuckets: number; more: number } {
    return { inBuckets: this.entries.filter((v) => v !== undefined).length, more: this.more.size };
  }

  /** Whether bucket b holds an entry or has `more` set (a bucket not in use is all zeros). */
  inUse(b: number): boolean {
    return this.moreCount.has(b) || this.bucketEntries(b).some((v) => v !== undefined);
  }

  /** Bucket b's struct vip_bucket, each entry with the slot `slotOf` gives it. */
  bucket(b: number, slotOf: (v: Vip) => number): Buffer {
    const value = Buffer.alloc(VIP_BUCKET_SIZE);
    for (const [i, v] of this.bucketEntries(b).entries()) {
      if (v !== undefined) value.set(vipEntryOf(v.key, slotOf(v)), i * VIP_ENT_SIZE);
    }
    value.writeUInt32LE(this.moreCount.has(b) ? 1 : 0, VIP_BUCKET_MORE);
    return value;
  }

  private bucketEntries(b: number): (Vip | undefined)[] {
    return this.entries.slice(b * VIP_BUCKET_ENTRIES, (b + 1) * VIP_BUCKET_ENTRIES);
  }

  private countMore(b: number, delta: number): void {
    const n = (this.moreCount.get(b) ?? 0) + delta;
    if (n === 0) this.moreCount.delete(b);
    else this.moreCount.set(b, n);
  }

  /** The entry of bucket b holding key k (a free one for undefined), -1 if none. */
  private entryOf(b: number, k: VipKey | undefined): number {
    for (let at = b * VIP_BUCKET_ENTRIES; at < (b + 1) * VIP_BUCKET_ENTRIES; at++) {
      if (this.entries[at]?.key === k) return at;
    }
    return -1;
  }
}

const KEY0 = u32Value(0);
const BPF_ANY = 0;
/** A nodeports entry that goes is written as zeros: entries of an array map cannot be deleted. */
const ZERO_NODEPORT = Buffer.alloc(NODEPORT_VALUE_SIZE);

export class TargetSync {
  readonly slots: SlotAllocator;
  /** Where each VIP entry sits in the viptab buckets; its keys are those of vips4/vips6. */
  readonly table = new VipTable();
  /** VIP keys and buckets changed in the table but maybe not in the kernel: this sync's, or a failed write's. */
  private readonly pending4 = new Map<VipKey, Vip>();
  private readonly pending6 = new Map<VipKey, Vip>();
  private readonly pendingBuckets = new Set<number>();
  /** hosts4, hosts6 and nodeports as written: key -> u32 value, -1 where unknown after a failed write. */
  private readonly mirrors = new Map<string, Map<string | number, number>>();
  /** The config's and filters' value as written, by map name; none before the first write, or after a failed one. */
  private readonly values: Record<string, Buffer> = {};

  constructor(
    private readonly addon: BpfAddon,
    private readonly fds: Record<string, number>,
    maxSlots?: number,
  ) {
    this.slots = new SlotAllocator(maxSlots);
  }

  /** Throws a CaptureError ('maps') naming the map whose write failed; the next sync completes the work. */
  sync(t: Targets): void {
    const w = step('maps', 'preparing the eBPF maps', () => wantedMaps(t, this.slots));
    const change = this.table.update(w.vips);
    for (const v of [...change.added, ...change.removed]) (isVip4(v.key) ? this.pending4 : this.pending6).set(v.key, v);
    for (const b of change.buckets) this.pendingBuckets.add(b);
    const steps: Record<TargetMap, () => void> = {
      [MAP_VIPS4]: () => this.syncVips(MAP_VIPS4, this.pending4),
      [MAP_VIPS6]: () => this.syncVips(MAP_VIPS6, this.pending6),
      [MAP_VIPTAB]: () => this.syncBuckets(),
      [MAP_HOSTS4]: () => this.syncMirrored(MAP_HOSTS4, w.hosts4, textBytes),
      [MAP_HOSTS6]: () => this.syncMirrored(MAP_HOSTS6, w.hosts6, textBytes),
      // An array entry cannot be deleted: it is zeroed, and zeros are never written since they are there already.
      [MAP_NODEPORTS]: () =>
        this.syncMirrored(MAP_NODEPORTS, new Map([...w.nodePorts].filter(([, v]) => v !== 0)), u32Value, (fd, key) =>
          this.addon.bpfMapUpdate(fd, key, ZERO_NODEPORT, BPF_ANY),
        ),
      [MAP_CONFIG]: () => this.syncValue(MAP_CONFIG, w.config),
      [MAP_FILTERS]: () => this.syncValue(MAP_FILTERS, w.filters),
    };
    for (const name of TARGET_MAPS) step('maps', `updating the eBPF ${name} map`, steps[name]);
  }

  /** Keys in the table written with their slot, first; then the others deleted. */
  private syncVips(name: string, pending: Map<VipKey, Vip>): void {
    const fd = this.fds[name]!;
    const gone: Vip[] = [];
    for (const v of pending.values()) {
      if (!this.table.has(v.key, v.bucket)) gone.push(v);
      else this.addon.bpfMapUpdate(fd, textBytes(v.key), u32Value(this.slots.find(v.counterId)), BPF_ANY);
    }
    for (const v of gone) this.addon.bpfMapDelete(fd, textBytes(v.key));
    pending.clear();
  }

  private syncBuckets(): void {
    const slotOf = (v: Vip) => this.slots.find(v.counterId);
    for (const b of this.pendingBuckets) {
      this.addon.bpfMapUpdate(this.fds[MAP_VIPTAB]!, u32Value(b), this.table.bucket(b, slotOf), BPF_ANY);
      this.pendingBuckets.delete(b);
    }
  }

  /** Writes new and changed entries, then removes those gone (`remove`), so a key present in both never disappears. */
  private syncMirrored<K extends string | number>(
    name: string,
    next: Map<K, number>,
    keyBytes: (k: K) => Buffer,
    remove: (fd: number, key: Buffer) => void = (fd, key) => this.addon.bpfMapDelete(fd, key),
  ) {
    const fd = this.fds[name]!;
    const current = (this.mirrors.get(name) ?? new Map()) as Map<K, number>;
    const changed = [...next].filter(([k, value]) => current.get(k) !== value);
    const gone = [...current.keys()].filter((k) => !next.has(k));
    if (changed.length || gone.length) {
      // Until done, the map holds a mix of both: every key has an unknown value for the next sync to rewrite or remove.
      this.mirrors.set(name, new Map([...current.keys(), ...next.keys()].map((k) => [k, -1])));
      for (const [k, value] of changed) this.addon.bpfMapUpdate(fd, keyBytes(k), u32Value(value), BPF_ANY);
      for (const k of gone) remove(fd, keyBytes(k));
    }
    this.mirrors.set(name, next);
  }

  /** A one-value array map (config, filters): written when its value differs from the one written last. */
  private syncValue(name: string, next: Buffer): void {
    if (this.values[name]?.equals(next)) return;
    delete this.values[name]; // unknown, should the write fail
    this.addon.bpfMapUpdate(this.fds[name]!, KEY0, next, BPF_ANY);
    this.values[name] = next;
  }
}
