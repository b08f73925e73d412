// The typed-array sets behind the eBPF maps' mirrors (src/capture/number-sets.ts): every key
// found after growth, shrinking and deletion (backward shift must not lose a key of a probe
// run), keys whose hashes collide, removal and re-add, and the keys the number forms use
// (up to 2^53 - 1, negative, fractional placeholders, -0).
import { describe, expect, it } from 'vitest';
import { hashOf, NumberIndex, NumberSet } from '../../../src/capture/number-sets.js';

/** A small deterministic generator (xorshift32). */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

/** `n` distinct numbers whose hashes land on the same entry of a table of `size` entries. */
function colliding(n: number, size: number): number[] {
  const out: number[] = [];
  const want = hashOf(2 ** 40) & (size - 1);
  for (let v = 2 ** 40; out.length < n; v += 7) if ((hashOf(v) & (size - 1)) === want) out.push(v);
  return out;
}

describe('NumberIndex', () => {
  it('gives each value one position for good, in the order added, across growth', () => {
    const idx = new NumberIndex(8);
    const values = Array.from({ length: 5000 }, (_, i) => (i % 3 === 0 ? -1 - i : i * 2 ** 20 + 0.5 * (i % 2)));
    values.push(2 ** 53 - 1, 0);
    values.forEach((v, i) => expect(idx.add(v)).toBe(i));
    expect(idx.size).toBe(values.length);
    values.forEach((v, i) => {
      expect(idx.indexOf(v)).toBe(i);
      expect(idx.at(i)).toBe(v);
      expect(idx.add(v)).toBe(i); // again: the same position, nothing added
    });
    expect(idx.size).toBe(values.length);
    expect(idx.indexOf(-0)).toBe(idx.indexOf(0));
    expect(idx.indexOf(3)).toBe(-1);
    expect(idx.indexOf(2 ** 53 - 2)).toBe(-1);
  });

  it('finds values whose hashes collide', () => {
    const idx = new NumberIndex(64);
    const same = colliding(40, 128);
    same.forEach((v) => idx.add(v));
    same.forEach((v, i) => expect(idx.indexOf(v)).toBe(i));
    expect(idx.indexOf(same[39]! + 7)).toBe(-1);
  });

  it('refuses NaN and positions it does not have', () => {
    const idx = new NumberIndex();
    expect(() => idx.add(NaN)).toThrow(/NaN/);
    idx.add(1);
    expect(() => idx.at(1)).toThrow(RangeError);
    expect(() => idx.at(-1)).toThrow(RangeError);
    expect(idx.indexOf(NaN)).toBe(-1);
  });
});

describe('NumberSet', () => {
  it('matches a Set under random adds and deletes over a small universe (collisions, removal and re-add)', () => {
    const r = rng(7);
    const set = new NumberSet();
    const ref = new Set<number>();
    const universe = Array.from({ length: 300 }, (_, i) => (i % 2 ? i * 2 ** 30 : -i - 0.5));
    for (let step = 0; step < 40_000; step++) {
      const v = universe[Math.floor(r() * universe.length)]!;
      // Phases that mostly add, then mostly delete: the table grows and shrinks several times.
      const adding = Math.floor(step / 5000) % 2 === 0 ? r() < 0.8 : r() < 0.2;
      if (adding) expect(set.add(v)).toBe(!ref.has(v));
      else expect(set.delete(v)).toBe(ref.has(v));
      if (adding) ref.add(v);
      else ref.delete(v);
      if (step % 997 === 0) for (const u of universe) expect(set.has(u)).toBe(ref.has(u));
    }
    expect(set.size).toBe(ref.size);
    expect(set.toArray().sort((a, b) => a - b)).toEqual([...ref].sort((a, b) => a - b));
  });

  it('grows past 3/4 full and shrinks back to its initial size when emptied', () => {
    const set = new NumberSet();
    expect(set.capacity).toBe(8);
    for (let i = 0; i < 6; i++) set.add(i * 1e9);
    expect(set.capacity).toBe(8);
    set.add(6e9);
    expect(set.capacity).toBe(16);
    for (let i = 7; i < 10_000; i++) set.add(i * 1e9);
    expect(set.capacity).toBe(16384);
    for (let i = 0; i < 10_000; i++) expect(set.delete(i * 1e9)).toBe(true);
    expect(set.size).toBe(0);
    expect(set.capacity).toBe(8);
    expect(set.toArray()).toEqual([]);
    // Re-added after all that, every key is found again.
    for (let i = 0; i < 100; i++) set.add(i * 1e9);
    for (let i = 0; i < 100; i++) expect(set.has(i * 1e9)).toBe(true);
  });

  it('keeps a run of colliding keys reachable when keys are deleted from its middle, and its start', () => {
    const set = new NumberSet(48); // 64 entries, never shrinks below
    expect(set.capacity).toBe(64);
    const same = colliding(12, 64);
    const other = colliding(6, 64).map((v) => v + 1); // other homes, probing through the run
    for (const v of [...same, ...other]) set.add(v);
    for (const gone of [same[5]!, same[0]!, same[11]!]) {
      expect(set.delete(gone)).toBe(true);
      expect(set.has(gone)).toBe(false);
    }
    for (const v of [...same, ...other])
      expect(set.has(v)).toBe([same[5], same[0], same[11]].includes(v) ? false : true);
    expect(set.add(same[5]!)).toBe(true); // re-added
    expect(set.has(same[5]!)).toBe(true);
    expect(set.size).toBe(same.length + other.length - 2);
  });

  it('takes -0 as 0, and refuses NaN', () => {
    const set = new NumberSet();
    set.add(-0);
    expect(set.has(0)).toBe(true);
    expect(set.add(0)).toBe(false);
    expect(() => set.add(NaN)).toThrow(/NaN/);
    expect(set.has(NaN)).toBe(false);
    expect(set.delete(NaN)).toBe(false);
    expect(set.delete(0)).toBe(true);
  });
});
