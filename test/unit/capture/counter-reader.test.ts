// CounterMapReader (src/capture/ebpf.ts) against a model of the kernel's batch lookup:
// every entry read once with its per-CPU sums, whatever the batch size; batches start small and
// grow while they come back full, up to the bound, so that a small hash keeps small buffers.
import { describe, expect, it } from 'vitest';
import { counterKey } from '../../../src/capture/bpf-layout.js';
import { CounterMapReader, perCpuStride } from '../../../src/capture/ebpf.js';
import { address16 } from '../../../src/capture/targets.js';
import type { BpfAddon } from '../../../src/native/bpf.js';

const CPUS = 3;
const STRIDE = perCpuStride(16);

/** A per-CPU hash of `n` counter keys; entry j counts j + c packets and (j + c) * 2^33 bytes on CPU c. */
function fakeHash(n: number) {
  const keys = Array.from({ length: n }, (_, j) =>
    counterKey(address16(`10.0.${j >> 8}.${j & 255}`), 80, 6, 'to_lb', 'egress'),
  );
  const calls: number[] = [];
  const addon = {
    bpfMapLookupBatch(
      _fd: number,
      k: Buffer,
      v: Buffer,
      token: Buffer,
      first: boolean,
      status: Int32Array,
      max: number,
    ) {
      expect(k.length).toBeGreaterThanOrEqual(max * 24);
      expect(v.length).toBeGreaterThanOrEqual(max * CPUS * STRIDE);
      calls.push(max);
      const from = first ? 0 : token.readUInt32LE(0);
      const to = Math.min(n, from + max);
      for (let j = from; j < to; j++) {
        keys[j]!.copy(k, (j - from) * 24);
        for (let c = 0; c < CPUS; c++) {
          const off = ((j - from) * CPUS + c) * STRIDE;
          v.writeBigUInt64LE(BigInt(j + c), off);
          v.writeBigUInt64LE(BigInt(j + c) << 33n, off + 8);
        }
      }
      token.writeUInt32LE(to, 0);
      status[0] = to - from;
      status[1] = to === n ? 1 : 0;
    },
  } as unknown as BpfAddon;
  return { addon, calls };
}

const expectAll = (got: ReturnType<CounterMapReader['read']>, n: number) => {
  expect(got).toHaveLength(n);
  got.forEach((s, j) => {
    expect(s).toMatchObject({
      target: `10.0.${j >> 8}.${j & 255}`,
      port: 80,
      proto: 'tcp',
      kind: 'to_lb',
      direction: 'egress',
    });
    expect(s.packets).toBe(3 * j + 3);
    expect(s.bytes).toBe((3 * j + 3) * 2 ** 33);
  });
};

describe('CounterMapReader', () => {
  it('reads every entry once, growing its batches while they come back full', () => {
    const { addon, calls } = fakeHash(1000);
    const r = new CounterMapReader(addon, 1, CPUS, 4096, 16);
    expect(r.batchSize).toBe(16);
    expectAll(r.read(), 1000);
    expect(calls).toEqual([16, 64, 256, 1024]);
    expect(r.batchSize).toBe(1024);
    calls.length = 0;
    expectAll(r.read(), 1000);
    expect(calls).toEqual([1024]);
  });

  it('stays small for a small hash, and never grows past its bound', () => {
    const small = fakeHash(10);
    const r = new CounterMapReader(small.addon, 1, CPUS);
    expectAll(r.read(), 10);
    expect(r.batchSize).toBe(128);
    const big = fakeHash(700);
    const bounded = new CounterMapReader(big.addon, 1, CPUS, 100, 16);
    expectAll(bounded.read(), 700);
    expect(big.calls).toEqual([16, 64, ...Array<number>(7).fill(100)]);
    expect(bounded.batchSize).toBe(100);
  });

  it('an empty hash gives no sample', () => {
    expect(new CounterMapReader(fakeHash(0).addon, 1, CPUS).read()).toEqual([]);
  });
});
