// What the agent keeps of the eBPF maps for the life of the program: counter slots handed out,
// and where each VIP entry sits in the viptab buckets. Both are kept in typed arrays of the keys'
// number forms (ebpf-keys.ts); text only for IPv6.
import {
  MAX_SLOTS,
  VIP_BUCKET_ENTRIES,
  VIP_BUCKET_MORE,
  VIP_BUCKET_SIZE,
  VIP_ENT_SIZE,
  VIPTAB_BUCKETS,
} from './bpf-layout.js';
import { type CounterId, counterIdOf, counterKeyOf, type VipKey, vipEntryOf, vipFilterBit } from './ebpf-keys.js';
import { NumberIndex, NumberSet } from './number-sets.js';

/**
 * Counter slots of the `slots` array, one per counter key the program counts by slot (a VIP
 * entry's to_lb, a NodePort's loop_return per family the node has local addresses of:
 * slotFamilies in ebpf-maps.ts). A key keeps its slot for the life of the agent, also while its
 * target is gone, and a slot never changes key: the per-CPU sums stay monotonic. When
 * MAX_SLOTS - 1 are taken, new keys get 0 (none) and the program counts them in the counters
 * hash, as before slots; so a key's slot, once it has one, never changes, and what was written
 * for a key can be told again from the key.
 */
export class SlotAllocator {
  /**
   * Position p: the counter id of slot p + 1. A text id stands there as p + 1.5, a number no
   * counter id is (those are integers), and is found through `texts`.
   */
  private readonly ids = new NumberIndex(64);
  private readonly texts = new Map<string, number>();
  private readonly textOf = new Map<number, string>();

  constructor(private readonly max = MAX_SLOTS) {}

  /** The slot of a struct ctr_key, handed out now if it has none and one is left; 0 when none is. */
  slot(key: Uint8Array): number {
    return this.slotOf(counterIdOf(key));
  }

  slotOf(id: CounterId): number {
    const had = this.find(id);
    if (had !== 0 || this.used >= this.max) return had;
    const slot = this.used;
    if (typeof id === 'number') this.ids.add(id);
    else {
      this.ids.add(slot + 0.5);
      this.texts.set(id, slot);
      this.textOf.set(slot, id);
    }
    return slot;
  }

  /** The slot `id` has, 0 if none (none is handed out). */
  find(id: CounterId): number {
    if (typeof id === 'string') return this.texts.get(id) ?? 0;
    return this.ids.indexOf(id) + 1;
  }

  /** The struct ctr_key slot `slot` counts. */
  keyOf(slot: number): Buffer {
    if (!Number.isInteger(slot) || slot < 1 || slot >= this.used)
      throw new RangeError(`slot ${slot} was not handed out`);
    return counterKeyOf(this.textOf.get(slot) ?? this.ids.at(slot - 1));
  }

  /** Slots handed out, slot 0 included (the part of the array the reader reads). */
  get used(): number {
    return this.ids.size + 1;
  }
}

/** What VipTable.update changed. */
export interface VipTableChange {
  /** Keys that were not in the table and are now (each once). */
  added: VipKey[];
  /** Keys that were in the table and are not now. */
  removed: VipKey[];
  /** Buckets whose value changed (an entry taken or freed, `more` set or cleared), each once. */
  buckets: number[];
}

/** entries[] of a free entry, and of an IPv6 one (its key in `text`). VIP key numbers are >= 0. */
const FREE = -1;
const TEXT = -2;

/** A set of VIP keys: the numbers in a NumberSet, the texts (IPv6) in a Set. */
class VipKeySet {
  private readonly numbers = new NumberSet();
  private readonly texts = new Set<string>();

  has(k: VipKey): boolean {
    return typeof k === 'number' ? this.numbers.has(k) : this.texts.has(k);
  }

  add(k: VipKey): void {
    if (typeof k === 'number') this.numbers.add(k);
    else this.texts.add(k);
  }

  delete(k: VipKey): void {
    if (typeof k === 'number') this.numbers.delete(k);
    else this.texts.delete(k);
  }

  get size(): number {
    return this.numbers.size + this.texts.size;
  }

  /** The keys now (a copy). */
  toArray(): VipKey[] {
    return [...this.numbers.toArray(), ...this.texts];
  }
}

/**
 * Where each VIP entry sits in the program's `viptab` buckets, for the life of the agent: an
 * entry keeps its place while its key stays, because a bucket is rewritten as a whole while the
 * program may be reading it, and only the entries that change may read torn. A new key takes a
 * free entry of its bucket; when there is none it is looked up in vips4/vips6 only (the bucket's
 * `more`) and stays there while it stays. The table holds exactly the keys of the last update:
 * those vips4/vips6 hold.
 */
export class VipTable {
  /** Entry i of bucket b at b * VIP_BUCKET_ENTRIES + i: its key number, FREE or TEXT. Allocated with the first key. */
  private entries = new Float64Array(0);
  private readonly text = new Map<number, string>();
  /** Keys looked up in the hash only. */
  private readonly more = new VipKeySet();
  /** Per bucket, how many of `more` are its. */
  private moreCount = new Uint32Array(0);

  /** Makes the table hold exactly the keys of `wanted` (duplicates are one key) and says what changed. */
  update(wanted: Iterable<VipKey>): VipTableChange {
    const change: VipTableChange = { added: [], removed: [], buckets: [] };
    this.allocate();
    // Buckets touched -> what they held before: one `more` key going as another comes leaves
    // the value as it was, and is not written.
    const before = new Map<number, string>();
    const touch = (b: number) => {
      if (!before.has(b)) before.set(b, this.signature(b));
    };
    // Keys staying are marked, new ones kept for after the frees: a freed entry goes to a new key of its bucket.
    const stays = new Uint8Array(this.entries.length);
    const moreStays = new VipKeySet();
    const fresh: VipKey[] = [];
    for (const k of wanted) {
      const at = this.entryOf(bucketOf(k), k);
      if (at >= 0) stays[at] = 1;
      else if (this.more.has(k)) moreStays.add(k);
      else fresh.push(k);
    }
    for (let at = 0; at < this.entries.length; at++) {
      if (this.entries[at] === FREE || stays[at]) continue;
      change.removed.push(this.keyAt(at));
      touch(Math.floor(at / VIP_BUCKET_ENTRIES));
      this.entries[at] = FREE;
      this.text.delete(at);
    }
    if (moreStays.size < this.more.size) {
      for (const k of this.more.toArray()) {
        if (moreStays.has(k)) continue;
        change.removed.push(k);
        this.more.delete(k);
        const b = bucketOf(k);
        touch(b);
        this.moreCount[b]!--;
      }
    }
    for (const k of fresh) {
      const b = bucketOf(k);
      if (this.entryOf(b, k) >= 0 || this.more.has(k)) continue; // a duplicate of one placed just now
      change.added.push(k);
      touch(b);
      const free = this.entryOf(b, undefined);
      if (free >= 0) {
        this.entries[free] = typeof k === 'number' ? k : TEXT;
        if (typeof k === 'string') this.text.set(free, k);
      } else {
        this.more.add(k);
        this.moreCount[b]!++;
      }
    }
    for (const [b, was] of before) if (this.signature(b) !== was) change.buckets.push(b);
    return change;
  }

  /** What bucket b's value is made of: its entries' keys (their slots follow from them) and `more`. */
  private signature(b: number): string {
    let s = this.moreCount[b] ? 'more' : '';
    for (let i = 0; i < VIP_BUCKET_ENTRIES; i++) {
      const at = b * VIP_BUCKET_ENTRIES + i;
      s += `|${this.entries[at] === FREE ? '' : this.keyAt(at)}`;
    }
    return s;
  }

  has(k: VipKey): boolean {
    return this.more.has(k) || (this.entries.length > 0 && this.entryOf(bucketOf(k), k) >= 0);
  }

  /** Keys in the table, for tests: in a bucket's entries, and looked up in the hash only. */
  counts(): { inBuckets: number; more: number } {
    let inBuckets = 0;
    for (const e of this.entries) if (e !== FREE) inBuckets++;
    return { inBuckets, more: this.more.size };
  }

  /** Whether bucket b holds an entry or has `more` set (a bucket not in use is all zeros). */
  inUse(b: number): boolean {
    if (this.entries.length === 0) return false;
    if (this.moreCount[b]) return true;
    for (let i = 0; i < VIP_BUCKET_ENTRIES; i++) if (this.entries[b * VIP_BUCKET_ENTRIES + i] !== FREE) return true;
    return false;
  }

  /** Bucket b's struct vip_bucket, each entry with the slot `slotOf` gives its key. */
  bucket(b: number, slotOf: (k: VipKey) => number): Buffer {
    const v = Buffer.alloc(VIP_BUCKET_SIZE);
    if (this.entries.length === 0) return v;
    for (let i = 0; i < VIP_BUCKET_ENTRIES; i++) {
      const at = b * VIP_BUCKET_ENTRIES + i;
      if (this.entries[at] === FREE) continue;
      const k = this.keyAt(at);
      v.set(vipEntryOf(k, slotOf(k)), i * VIP_ENT_SIZE);
    }
    v.writeUInt32LE(this.moreCount[b] ? 1 : 0, VIP_BUCKET_MORE);
    return v;
  }

  private allocate(): void {
    if (this.entries.length) return;
    this.entries = new Float64Array(VIPTAB_BUCKETS * VIP_BUCKET_ENTRIES).fill(FREE);
    this.moreCount = new Uint32Array(VIPTAB_BUCKETS);
  }

  private keyAt(at: number): VipKey {
    const e = this.entries[at]!;
    return e === TEXT ? this.text.get(at)! : e;
  }

  /** The entry of bucket b holding k (a free one for undefined), -1 if none. */
  private entryOf(b: number, k: VipKey | undefined): number {
    for (let i = 0; i < VIP_BUCKET_ENTRIES; i++) {
      const at = b * VIP_BUCKET_ENTRIES + i;
      const e = this.entries[at]!;
      if (k === undefined ? e === FREE : typeof k === 'number' ? e === k : e === TEXT && this.text.get(at) === k)
        return at;
    }
    return -1;
  }
}

/** A key's viptab bucket: its filter bit, masked. */
export const bucketOf = (k: VipKey): number => vipFilterBit(k) & (VIPTAB_BUCKETS - 1);
