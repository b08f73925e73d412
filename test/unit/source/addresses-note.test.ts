// The addresses source's change detection: a read whose only change is its note (the dumps were consistent again)
// is a change, so "addresses may be missing" clears with the next complete read.
import { describe, expect, it, vi } from 'vitest';

const reads: { snapshot: object; status: { reason?: string } }[] = [];
vi.mock('../../../src/kernel/addresses.js', async (real) => ({
  ...(await real<object>()),
  readAddresses: async () => reads.shift(),
}));
const { addresses } = await import('../../../src/source/addresses.js');

describe('addresses source', () => {
  it('clears its note when the same addresses are read again in full', async () => {
    const snapshot = { interfaces: [] };
    const note = 'link and address dumps disagreed 3 times: addresses may be missing';
    reads.push({ snapshot, status: { reason: note } }, { snapshot, status: {} }, { snapshot, status: {} });
    const reader = addresses.live!({});
    expect(await reader.read()).toMatchObject({ state: 'up', note });
    const again = await reader.read();
    expect(again.state).toBe('up');
    expect(again).not.toHaveProperty('note');
    expect(await reader.read()).toEqual({ state: 'unchanged' });
  });
});
