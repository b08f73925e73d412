import { describe, expect, it } from 'vitest';
import { ObjectStore } from '../../../src/cluster/object-store.js';

describe('ObjectStore', () => {
  it('keeps one value per namespace and name, counts them, and forgets empty namespaces', () => {
    const s = new ObjectStore<number>();
    s.set('a', 'x', 1);
    s.set('a', 'x', 2); // replaced, not added
    s.set('b', 'x', 3);
    s.set('', 'node-1', 4); // cluster-scoped
    expect(s.size).toBe(3);
    expect(s.get('a', 'x')).toBe(2);
    expect([...s.values()].sort()).toEqual([2, 3, 4]);
    expect(s.delete('a', 'y')).toBe(false);
    expect(s.delete('zz', 'x')).toBe(false);
    expect(s.delete('a', 'x')).toBe(true);
    expect(s.size).toBe(2);
    expect(s.get('a', 'x')).toBeUndefined();
    s.set('a', 'y', 5);
    expect([...s.values()].sort()).toEqual([3, 4, 5]);
    s.clear();
    expect(s.size).toBe(0);
    expect([...s.values()]).toEqual([]);
  });
});
