// What the agent keeps of the eBPF maps for the life of the program: counter slots handed out,
// and where each VIP entry sits in the viptab buckets, by the keys' identities (ebpf-keys.ts).
import {
  MAX_SLOTS,
  VIP_BUCKET_ENTRIES,
  VIP_BUCKET_MORE,
  VIP_BUCKET_SIZE,
  VIP_ENT_SIZE,
  VIPTAB_BUCKETS,
} from './bpf-layout.js';
import { type CounterId, counterIdOf, textBytes, type VipKey, vipEntryOf, vipFilterBit } from './ebpf-keys.js';

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
  /** Entry i of bucket b at b * VIP_BUCKET_ENTRIES + i: its key, undefined when free. Allocated with the first key. */
  private entries: (VipKey | undefined)[] = [];
  private readonly more = new Set<VipKey>();
  /** Per bucket with any, how many of `more` are its. */
  private readonly moreCount = new Map<number, number>();

  /**
   * Makes the table hold exactly the keys of `wanted` (duplicates are one key) and says what changed; buckets:
   * those whose value changed (an entry taken or freed, `more` set or cleared), each once.
   */
  update(wanted: Iterable<VipKey>): { added: VipKey[]; removed: VipKey[]; buckets: number[] } {
    const change = { added: [] as VipKey[], removed: [] as VipKey[], buckets: [] as number[] };
    if (this.entries.length === 0) this.entries = new Array(VIPTAB_BUCKETS * VIP_BUCKET_ENTRIES).fill(undefined);
    // Buckets touched -> their value before, so a `more` key replaced by another leaves the bucket unwritten.
    const before = new Map<number, string>();
    const touch = (b: number) => {
      if (!before.has(b)) before.set(b, this.signature(b));
    };
    // Keys staying are marked, new ones kept for after the frees: a freed entry goes to a new key of its bucket.
    const stays = new Set<number>();
    const moreStays = new Set<VipKey>();
    const fresh: VipKey[] = [];
    for (const k of wanted) {
      const at = this.entryOf(bucketOf(k), k);
      if (at >= 0) stays.add(at);
      else if (this.more.has(k)) moreStays.add(k);
      else fresh.push(k);
    }
    for (const [at, k] of this.entries.entries()) {
      if (k === undefined || stays.has(at)) continue;
      change.removed.push(k);
      touch(Math.floor(at / VIP_BUCKET_ENTRIES));
      this.entries[at] = undefined;
    }
    for (const k of this.more) {
      if (moreStays.has(k)) continue;
      change.removed.push(k);
      this.more.delete(k);
      const b = bucketOf(k);
      touch(b);
      this.countMore(b, -1);
    }
    for (const k of fresh) {
      const b = bucketOf(k);
      if (this.entryOf(b, k) >= 0 || this.more.has(k)) continue; // a duplicate of one placed just now
      change.added.push(k);
      touch(b);
      const free = this.entryOf(b, undefined);
      if (free >= 0) this.entries[free] = k;
      else {
        this.more.add(k);
        this.countMore(b, 1);
      }
    }
    for (const [b, was] of before) if (this.signature(b) !== was) change.buckets.push(b);
    return change;
  }

  /** What bucket b's value is made of: its entries' keys (their slots follow from them) and `more`. */
  private signature(b: number): string {
    let s = this.moreCount.has(b) ? 'more' : '';
    for (const k of this.bucketEntries(b)) s += `|${k ?? ''}`;
    return s;
  }

  has(k: VipKey): boolean {
    return this.more.has(k) || (this.entries.length > 0 && this.entryOf(bucketOf(k), k) >= 0);
  }

  /** Keys in the table, for tests: in a bucket's entries, and looked up in the hash only. */
  counts(): { inBuckets: number; more: number } {
    return { inBuckets: this.entries.filter((k) => k !== undefined).length, more: this.more.size };
  }

  /** Whether bucket b holds an entry or has `more` set (a bucket not in use is all zeros). */
  inUse(b: number): boolean {
    return this.moreCount.has(b) || this.bucketEntries(b).some((k) => k !== undefined);
  }

  /** Bucket b's struct vip_bucket, each entry with the slot `slotOf` gives its key. */
  bucket(b: number, slotOf: (k: VipKey) => number): Buffer {
    const v = Buffer.alloc(VIP_BUCKET_SIZE);
    for (const [i, k] of this.bucketEntries(b).entries()) {
      if (k !== undefined) v.set(vipEntryOf(k, slotOf(k)), i * VIP_ENT_SIZE);
    }
    v.writeUInt32LE(this.moreCount.has(b) ? 1 : 0, VIP_BUCKET_MORE);
    return v;
  }

  private bucketEntries(b: number): (VipKey | undefined)[] {
    return this.entries.slice(b * VIP_BUCKET_ENTRIES, (b + 1) * VIP_BUCKET_ENTRIES);
  }

  private countMore(b: number, delta: number): void {
    const n = (this.moreCount.get(b) ?? 0) + delta;
    if (n === 0) this.moreCount.delete(b);
    else this.moreCount.set(b, n);
  }

  /** The entry of bucket b holding k (a free one for undefined), -1 if none. */
  private entryOf(b: number, k: VipKey | undefined): number {
    const i = this.bucketEntries(b).indexOf(k);
    return i < 0 ? -1 : b * VIP_BUCKET_ENTRIES + i;
  }
}

/** A key's viptab bucket: its filter bit, masked. */
export const bucketOf = (k: VipKey): number => vipFilterBit(k) & (VIPTAB_BUCKETS - 1);
