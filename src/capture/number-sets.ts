// Sets of numbers in typed arrays, for the eBPF maps' keys in their number forms (ebpf-keys.ts):
// a Map or Set over keys above 2^31 costs ~40-80 bytes a key (a heap number each, and the hash
// table's entry); these cost 8-16 bytes a key.

const bits = new Float64Array(1);
const words = new Uint32Array(bits.buffer);

/** murmur3's 32-bit finalizer: spreads every input bit over the word. */
function fmix(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** A hash of a double's bits (integers' low mantissa words are mostly zeros, so both words count). */
export function hashOf(v: number): number {
  bits[0] = v;
  return fmix(words[0]! ^ fmix(words[1]! + 0x9e3779b9));
}

/**
 * An append-only list of distinct numbers, found by value (the counter slots' keys: ebpf-tables.ts
 * SlotAllocator): the values in a Float64Array by position, and an open-addressed table of
 * positions.
 */
export class NumberIndex {
  /** Position -> value. */
  private values: Float64Array;
  /** Linear-probing table of position + 1 (0 = empty), at most half full. */
  private table: Uint16Array | Uint32Array;
  private count = 0;

  constructor(capacity = 8) {
    let n = 8;
    while (n < capacity) n *= 2;
    this.values = new Float64Array(n);
    this.table = positions(2 * n, n);
  }

  get size(): number {
    return this.count;
  }

  /** The value at `position` (0 .. size - 1). */
  at(position: number): number {
    if (!(position >= 0 && position < this.count)) throw new RangeError(`NumberIndex: no position ${position}`);
    return this.values[position]!;
  }

  /** The position of `v`, -1 if it was never added. */
  indexOf(v: number): number {
    v += 0; // -0 and 0 are one key (=== says so; their bits differ)
    const mask = this.table.length - 1;
    for (let i = hashOf(v) & mask; ; i = (i + 1) & mask) {
      const p = this.table[i]!;
      if (p === 0) return -1;
      if (this.values[p - 1] === v) return p - 1;
    }
  }

  /** Adds `v` (once: an added value keeps its position) and returns its position. */
  add(v: number): number {
    if (Number.isNaN(v)) throw new RangeError('NumberIndex: NaN is not a key');
    v += 0;
    const had = this.indexOf(v);
    if (had >= 0) return had;
    if (this.count === this.values.length) this.grow();
    const at = this.count++;
    this.values[at] = v;
    this.place(at);
    return at;
  }

  private place(position: number): void {
    const mask = this.table.length - 1;
    let i = hashOf(this.values[position]!) & mask;
    while (this.table[i] !== 0) i = (i + 1) & mask;
    this.table[i] = position + 1;
  }

  private grow(): void {
    const values = new Float64Array(this.values.length * 2);
    values.set(this.values);
    this.values = values;
    this.table = positions(values.length * 2, values.length);
    for (let p = 0; p < this.count; p++) this.place(p);
  }
}

/** A table of `length` entries for positions + 1 up to `max`: 2 bytes an entry while they fit. */
const positions = (length: number, max: number): Uint16Array | Uint32Array =>
  max < 0xffff ? new Uint16Array(length) : new Uint32Array(length);

/**
 * A set of numbers (not NaN): linear probing in one Float64Array (NaN = empty), kept between 3/16
 * and 3/4 full (never below its initial size), with deletion by backward shift (no tombstones:
 * a set whose keys come and go stays as fast as a new one).
 */
export class NumberSet {
  private keys: Float64Array;
  private count = 0;
  private readonly min: number;

  /** `capacity`: keys it takes before it first grows. */
  constructor(capacity = 6) {
    let n = 8;
    while (n * 0.75 < capacity) n *= 2;
    this.min = n;
    this.keys = new Float64Array(n).fill(NaN);
  }

  get size(): number {
    return this.count;
  }

  has(v: number): boolean {
    return this.slotOf(v + 0) >= 0;
  }

  /** False when it was there already. */
  add(v: number): boolean {
    if (Number.isNaN(v)) throw new RangeError('NumberSet: NaN is not a key');
    v += 0; // -0 and 0 are one key
    if (this.slotOf(v) >= 0) return false;
    if ((this.count + 1) * 4 > this.keys.length * 3) this.resize(this.keys.length * 2);
    this.insert(v);
    this.count++;
    return true;
  }

  /** False when it was not there. */
  delete(v: number): boolean {
    let hole = this.slotOf(v + 0);
    if (hole < 0) return false;
    const keys = this.keys;
    const mask = keys.length - 1;
    // Each key after the hole, up to the next empty entry, moves into it unless its home
    // (where its probe starts) lies cyclically after the hole, up to where it is.
    for (let j = (hole + 1) & mask; !Number.isNaN(keys[j]!); j = (j + 1) & mask) {
      const home = hashOf(keys[j]!) & mask;
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        keys[hole] = keys[j]!;
        hole = j;
      }
    }
    keys[hole] = NaN;
    this.count--;
    if (this.keys.length > this.min && this.count * 16 < this.keys.length * 3) this.resize(this.keys.length / 2);
    return true;
  }

  /** The keys now, in no particular order (a copy: the set may change while it is read). */
  toArray(): number[] {
    const out: number[] = [];
    for (const k of this.keys) if (!Number.isNaN(k)) out.push(k);
    return out;
  }

  /** Entries in the table, for tests of growth and shrinking. */
  get capacity(): number {
    return this.keys.length;
  }

  private slotOf(v: number): number {
    const keys = this.keys;
    const mask = keys.length - 1;
    for (let i = hashOf(v) & mask; ; i = (i + 1) & mask) {
      const k = keys[i]!;
      if (k === v) return i;
      if (Number.isNaN(k)) return -1;
    }
  }

  private insert(v: number): void {
    const mask = this.keys.length - 1;
    let i = hashOf(v) & mask;
    while (!Number.isNaN(this.keys[i]!)) i = (i + 1) & mask;
    this.keys[i] = v;
  }

  private resize(n: number): void {
    const old = this.keys;
    this.keys = new Float64Array(n).fill(NaN);
    for (const k of old) if (!Number.isNaN(k)) this.insert(k);
  }
}
