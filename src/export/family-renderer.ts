// One metric family rendered in chunks of sample lines, each kept (as text
// compressed by gzip-chunks.ts) until its samples change: with 5,000 Service
// ports most samples do not change between scrapes, and formatting ~50k series
// costs tens of ms and MBs of garbage per scrape (bench/agent.ts).
import { escapeHelp, fmix32, type Family } from './family.js';
import { chunkOf, type Chunk } from './gzip-chunks.js';

const valueText = (v: number): string => (Number.isNaN(v) ? 'Nan' : v === Infinity ? '+Inf' : v === -Infinity ? '-Inf' : `${v}`);

/** Sample lines per chunk: small enough that a changed counter re-formats little, large enough to be few. */
const CHUNK_LINES = 256;

/**
 * A chunk as kept from one scrape to the next: its compressed text, and what tells whether the
 * next scrape's samples at its place are the same. Not the items: a chunk that changed is formatted
 * again from the current scrape's items, so keeping them (and their label strings) would only keep
 * state the collectors hold anyway.
 */
interface KeptChunk {
  out: Chunk;
  /** The samples' values, compared exactly: a counter that moved formats the chunk again. */
  values: Float64Array;
  /** Samples in the chunk (values.length once kept); -1 before its first scrape. */
  n: number;
  /** A 64-bit hash (two halves) of the chunk's label sets in their order. */
  fp1: number;
  fp2: number;
  // This scrape's: where the chunk's samples are in the items, and whether to format it again.
  from: number;
  to: number;
  stale: boolean;
}

/** Slots of the key-hash cache (a power of 2). */
const KEY_CACHE = 16;
/** FNV-1a's offsets of a key's two hashes (as hashPair's, family.ts). */
const KEY_OFFSET1 = 0x811c9dc5 | 0;
const KEY_OFFSET2 = 0x2b9a8c4d;

const newChunk = (): KeptChunk => ({ out: chunkOf(''), values: new Float64Array(0), n: -1, fp1: 0, fp2: 0, from: 0, to: 0, stale: true });

/**
 * Mixes a word into a running hash, as FxHash does: the words are themselves hashes of strings
 * (well spread), so a rotation and one multiplication suffice; the rotation makes it
 * order-sensitive (the same label sets in another order hash apart), and for a given hash the
 * step is a bijection of the word. The chunk's hash is finished by fmix32.
 */
function step(h: number, k: number, m: number): number {
  return Math.imul(((h << 5) | (h >>> 27)) ^ k, m);
}

/**
 * Renders a family in chunks of CHUNK_LINES samples, reusing last scrape's chunk when its samples
 * are the same: the same label sets in the same order (by a 64-bit hash of them, made from each
 * group's hash, computed once per label text, and the key's) and the same values (kept exactly, in
 * a Float64Array: 8 bytes a sample). With 5,000 Service ports most samples do not change between
 * scrapes, and formatting ~50k series costs tens of ms and MBs of garbage (bench/agent.ts).
 * Repeated label sets in one scrape add up (counters) or replace (gauges), as in prom-client. They
 * are looked for only when the label sets change (new Services, new states), and a family that has
 * any is rendered whole (rare: the agent does not produce them).
 */
export class FamilyRenderer<S, T> {
  private chunks: KeptChunk[] = [];
  /**
   * The last keys hashed, by slot (their length and last character): most families' keys are a
   * few strings that come back at every sample (kinds, states, outcomes), and hashing them again
   * was the larger part of the scan (cpu profile).
   */
  private readonly keyCache: string[] = new Array<string>(KEY_CACHE).fill('');
  /** The hashes of keyCache's keys, two a slot: at first, of '' (FNV's offsets). */
  private readonly keyHashes = Int32Array.from({ length: 2 * KEY_CACHE }, (_, i) => (i % 2 === 0 ? KEY_OFFSET1 : KEY_OFFSET2));
  private readonly header: Chunk;
  private readonly empty: Chunk[];
  constructor(readonly f: Family<S, T>) {
    this.header = chunkOf(`# HELP ${f.name} ${escapeHelp(f.help)}\n# TYPE ${f.name} ${f.type}\n`);
    // An unlabelled counter shows 0 rather than nothing (prom-client's reset()).
    this.empty = f.type === 'counter' && f.labelNames.length === 0 ? [this.header, chunkOf(`${f.name} 0\n`)] : [this.header];
  }

  /** Appends the family's chunks, as this state has them, to `out`. */
  render(state: S, out: Chunk[]): void {
    const f = this.f;
    const chunks = this.chunks;
    const items = f.items(state);
    let relabelled = false; // some chunk's label sets differ from last scrape's
    let used = 0; // chunks filled so far
    let c: KeptChunk | undefined; // the chunk being filled
    let n = 0; // samples in it
    let h1 = 0;
    let h2 = 0;
    let moved = false; // a value differs from the kept one at its place
    let from = 0;
    let values: Float64Array = chunks[0]?.values ?? new Float64Array(0); // c's
    const { keyCache, keyHashes } = this;
    // An index loop, not for-of: at 50k samples a scrape, for-of's iterator results are ~1.8 MB
    // of garbage per scrape (allocation sampling), several scavenges in every scrape.
    for (let i = 0; i < items.length; i++) {
      const x = items[i]!;
      const g = f.group(x);
      if (g === null) continue;
      if (c === undefined || n === CHUNK_LINES) {
        if (c) relabelled = keep(c, n, h1, h2, moved, from, i) || relabelled;
        c = chunks[used] ??= newChunk();
        values = c.values;
        used++;
        n = 0;
        h1 = 0x2f693b15;
        h2 = 0x6c0a7f3d;
        moved = false;
        from = i;
      }
      const key = f.key(x);
      const slot = (key.length * 31 + (key.length > 0 ? key.charCodeAt(key.length - 1) : 0)) & (KEY_CACHE - 1);
      let k1: number;
      let k2: number;
      if (keyCache[slot] === key) {
        k1 = keyHashes[2 * slot]!;
        k2 = keyHashes[2 * slot + 1]!;
      } else {
        k1 = KEY_OFFSET1;
        k2 = KEY_OFFSET2;
        for (let j = 0; j < key.length; j++) {
          const ch = key.charCodeAt(j);
          k1 = Math.imul(k1 ^ ch, 0x01000193);
          k2 = Math.imul(k2 ^ ch, 0x5bd1e995);
        }
        keyCache[slot] = key;
        keyHashes[2 * slot] = k1;
        keyHashes[2 * slot + 1] = k2;
      }
      // The group and key of a sample mixed in as two blocks, so that (group, key) pairs that
      // trade parts do not hash alike.
      h1 = step(step(h1, g.h1, 0x27220a95), k1, 0x27220a95);
      h2 = step(step(h2, g.h2, 0x9e3779b1), k2, 0x9e3779b1);
      const v = f.value(x);
      // Written in place: only this comparison needs the old value. Past the array's end (more
      // samples than last time) the write is dropped; the chunk is then relabelled anyway.
      if (values[n] !== v) {
        moved = true;
        values[n] = v;
      }
      n++;
    }
    if (c) relabelled = keep(c, n, h1, h2, moved, from, items.length) || relabelled;
    if (used !== chunks.length) {
      chunks.length = used;
      relabelled = true;
    }
    if (relabelled && hasRepeats(f, items)) {
      this.chunks = [];
      out.push(...this.renderMerged(items));
      return;
    }
    if (used === 0) {
      out.push(...this.empty);
      return;
    }
    out.push(this.header);
    for (const k of chunks) {
      if (k.stale) {
        if (k.values.length !== k.n) k.values = this.valuesOf(items, k.from, k.to, k.n);
        k.out = chunkOf(this.lines(items, k.from, k.to));
        k.stale = false;
      }
      out.push(k.out);
    }
  }

  /** The values of items[from, to) at their exact count (the chunk's sample count changed). */
  private valuesOf(items: readonly T[], from: number, to: number, n: number): Float64Array {
    const { f } = this;
    const values = new Float64Array(n);
    for (let i = from, j = 0; i < to; i++) if (f.group(items[i]!) !== null) values[j++] = f.value(items[i]!);
    return values;
  }

  /** The sample lines of items[from, to), skipping the items without a group. */
  private lines(items: readonly T[], from: number, to: number): string {
    const { f } = this;
    let text = '';
    for (let i = from; i < to; i++) {
      const x = items[i]!;
      const g = f.group(x);
      if (g === null) continue;
      text += this.line(f.labels(x, g), f.value(x));
    }
    return text;
  }

  private line(labels: string, value: number): string {
    return `${this.f.name}${labels ? `{${labels}}` : ''} ${valueText(value)}\n`;
  }

  /** The whole family with repeated label sets merged: counters add up, gauges keep the last. */
  private renderMerged(items: readonly T[]): Chunk[] {
    const { f } = this;
    const index = new Map<string, number>();
    const labels: string[] = [];
    const values: number[] = [];
    for (const x of items) {
      const g = f.group(x);
      if (g === null) continue;
      const id = `${g.text}\0${f.key(x)}`;
      const at = index.get(id);
      const v = f.value(x);
      if (at === undefined) {
        index.set(id, values.length);
        labels.push(f.labels(x, g));
        values.push(v);
      } else values[at] = f.type === 'counter' ? values[at]! + v : v;
    }
    let text = '';
    for (let i = 0; i < labels.length; i++) text += this.line(labels[i]!, values[i]!);
    return [this.header, chunkOf(text)];
  }
}

/**
 * Records a filled chunk's count, label hash and place in this scrape's items, and whether it is
 * to be formatted again; true when its label sets differ from last scrape's. A function rather
 * than a closure in render(): the loop's variables a closure shares would live in a context
 * object instead of registers.
 */
function keep(k: KeptChunk, n: number, h1: number, h2: number, moved: boolean, from: number, to: number): boolean {
  const fp1 = fmix32(h1);
  const fp2 = fmix32(h2);
  const labelsSame = n === k.n && fp1 === k.fp1 && fp2 === k.fp2;
  k.stale = moved || !labelsSame;
  k.n = n;
  k.fp1 = fp1;
  k.fp2 = fp2;
  k.from = from;
  k.to = to;
  return !labelsSame;
}

/**
 * Whether two samples share a label set. Looked for by hash: one string per sample in a Set of
 * exact ids was, at the first scrape and at every change of label sets, megabytes of garbage for a
 * family of 20k samples (the agent's RSS peaked on it right after its first sync, bench/agent.ts).
 * Samples whose 32-bit hashes meet (a repeat, or a collision) are compared exactly.
 */
function hasRepeats<S, T>(f: Family<S, T>, items: readonly T[]): boolean {
  // Open addressing over typed arrays: a Map of 20k entries grows its table by rehashing (~6 MB
  // allocated over the agent's families at the first scrape, allocation sampling). A slot holds
  // the sample's index + 1 (0: empty); samples whose hashes meet are compared exactly.
  let size = 1024;
  while (size < items.length * 2) size *= 2;
  const hashes = new Int32Array(size);
  const at = new Int32Array(size);
  const mask = size - 1;
  for (let i = 0; i < items.length; i++) {
    const x = items[i]!;
    const g = f.group(x);
    if (g === null) continue;
    const key = f.key(x);
    const h = fmix32(step(g.h1, keyHash(key), 0x27220a95) ^ g.h2);
    for (let s = h & mask; ; s = (s + 1) & mask) {
      const j = at[s]! - 1;
      if (j < 0) {
        hashes[s] = h;
        at[s] = i + 1;
        break;
      }
      if (hashes[s] === h && f.group(items[j]!)?.text === g.text && f.key(items[j]!) === key) return true;
    }
  }
  return false;
}

/** FNV-1a of a key (the first of hashPair's two, without the pair's array). */
function keyHash(key: string): number {
  let h = KEY_OFFSET1;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  return h;
}
