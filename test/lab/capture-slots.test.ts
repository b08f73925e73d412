// The counter slots' reader on the real kernel: the program's own `slots` per-CPU array (loaded,
// not attached: no packet, no namespace), values written per CPU and the slot marked in
// `slots_seen` as the program does, read back by SlotMapReader (in batches smaller than the slots
// handed out when many are marked, one by one when few are), each slot summed over CPUs under its
// counter key.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  COUNTER_VALUE_SIZE,
  counterKey,
  MAP_COUNTERS,
  MAP_SLOTS,
  MAP_SLOTS_SEEN,
  SLOTS_SEEN_VALUE_SIZE,
} from '../../src/capture/bpf-layout.js';
import { bpfObjectPath, CounterMapReader, perCpuStride, SlotMapReader } from '../../src/capture/ebpf.js';
import { SlotAllocator } from '../../src/capture/ebpf-maps.js';
import { address16 } from '../../src/capture/targets.js';
import { type BpfObject, bpfAddon } from '../../src/native/bpf.js';
import { isRoot } from '../support/netns.js';

describe.skipIf(!isRoot)('counter slots on the real kernel', () => {
  const addon = bpfAddon();
  let obj: BpfObject;
  let fd: number;
  let seenFd: number;
  const cpus = addon.bpfPossibleCpus();
  const stride = perCpuStride(COUNTER_VALUE_SIZE);

  beforeAll(() => {
    obj = addon.bpfObjectOpen(bpfObjectPath());
    addon.bpfObjectLoad(obj);
    fd = addon.bpfObjectMapFd(obj, MAP_SLOTS);
    seenFd = addon.bpfObjectMapFd(obj, MAP_SLOTS_SEEN);
  });
  afterAll(() => {
    if (obj) addon.bpfObjectClose(obj);
  });

  /** Writes slot's per-CPU values: CPU c holds packets = slot + c, bytes = 100 * (slot + c); marks it seen unless `mark` is false. */
  function fill(slot: number, mark = true): void {
    const key = Buffer.alloc(4);
    key.writeUInt32LE(slot);
    const v = Buffer.alloc(cpus * stride);
    for (let c = 0; c < cpus; c++) {
      v.writeBigUInt64LE(BigInt(slot + c), c * stride);
      v.writeBigUInt64LE(BigInt(100 * (slot + c)), c * stride + 8);
    }
    addon.bpfMapUpdate(fd, key, v, 0);
    if (mark) setSeen(slot, 1);
  }

  function setSeen(slot: number, value: number): void {
    const zero = Buffer.alloc(4);
    const seen = Buffer.alloc(SLOTS_SEEN_VALUE_SIZE);
    expect(addon.bpfMapLookup(seenFd, zero, seen)).toBe(true);
    seen[slot] = value;
    addon.bpfMapUpdate(seenFd, zero, seen, 0);
  }

  /** Every slot zero and unmarked: each test starts from a program just loaded. */
  function reset(): void {
    addon.bpfMapUpdate(seenFd, Buffer.alloc(4), Buffer.alloc(SLOTS_SEEN_VALUE_SIZE), 0);
    const key = Buffer.alloc(4);
    for (let s = 1; s <= 1100; s++) {
      key.writeUInt32LE(s);
      addon.bpfMapUpdate(fd, key, Buffer.alloc(cpus * stride), 0);
    }
  }

  const sumOver = (s: number) => Array.from({ length: cpus }, (_, c) => s + c).reduce((a, b) => a + b, 0);

  it('reads every slot handed out, in batches, under its key; unused and zero slots give no sample', () => {
    reset();
    const slots = new SlotAllocator();
    const ports = Array.from({ length: 10 }, (_, i) => 30000 + i);
    for (const p of ports) slots.slot(counterKey(address16('10.0.0.100'), p, 6, 'to_lb', 'egress'));
    // Slots 1..10 are handed out; 1..9 counted, 10 did not; 11 (never handed out) holds a stray value.
    for (let s = 1; s <= 9; s++) fill(s);
    fill(11);
    for (const batch of [3, 4096]) {
      const got = new SlotMapReader(addon, fd, seenFd, cpus, slots, batch).read();
      expect(
        got.map((x) => x.port),
        `batch ${batch}`,
      ).toEqual(ports.slice(0, 9));
      got.forEach((x, i) => {
        expect(x).toMatchObject({ target: '10.0.0.100', proto: 'tcp', kind: 'to_lb', direction: 'egress' });
        expect(x.packets).toBe(sumOver(i + 1));
        expect(x.bytes).toBe(100 * sumOver(i + 1));
      });
    }
  });

  it('with few slots marked, reads those one by one: an unmarked slot is not read, a marked zero one gives no sample', () => {
    reset();
    const slots = new SlotAllocator();
    for (let p = 0; p < 1000; p++)
      slots.slot(counterKey(address16('10.0.0.200'), 20000 + p, 17, 'loop_return', 'ingress'));
    // Slots 1..1000: 500 and 700 counted and marked; 600 holds a value but is not marked (the
    // program marks after counting, so a reading may come between the two); 800 marked, zero.
    for (const s of [500, 700]) fill(s);
    fill(600, false);
    const zeros = Buffer.alloc(cpus * stride);
    const key = Buffer.alloc(4);
    key.writeUInt32LE(800);
    addon.bpfMapUpdate(fd, key, zeros, 0);
    setSeen(800, 1);
    const got = new SlotMapReader(addon, fd, seenFd, cpus, slots).read();
    expect(got.map((x) => [x.port, x.packets, x.bytes])).toEqual([
      [20000 + 499, sumOver(500), 100 * sumOver(500)],
      [20000 + 699, sumOver(700), 100 * sumOver(700)],
    ]);
    expect(got[0]).toMatchObject({ target: '10.0.0.200', proto: 'udp', kind: 'loop_return', direction: 'ingress' });
    // Once marked, it is read.
    setSeen(600, 1);
    expect(new SlotMapReader(addon, fd, seenFd, cpus, slots).read().map((x) => x.port)).toEqual([20499, 20599, 20699]);
  });
  it('where the kernel has no batch lookup for per-CPU arrays (5.10 answers ENOTSUPP), reads every slot one by one, and tries no batch again', () => {
    reset();
    const slots = new SlotAllocator();
    const ports = Array.from({ length: 10 }, (_, i) => 31000 + i);
    for (const p of ports) slots.slot(counterKey(address16('10.0.0.150'), p, 6, 'to_lb', 'egress'));
    for (let s = 1; s <= 9; s++) fill(s);
    let batches = 0;
    // The real map, with the batch call answered as 5.10's kernel answers it (errno 524, ENOTSUPP).
    // (defineProperty: the addon's own functions are read-only, so an assignment would not shadow them.)
    const old = Object.defineProperty(Object.create(addon) as typeof addon, 'bpfMapLookupBatch', {
      value: () => {
        batches++;
        throw Object.assign(new Error('bpf_map_lookup_batch: Unknown error 524'), {
          errno: 524,
          code: 'Unknown error 524',
        });
      },
    });
    const reader = new SlotMapReader(old, fd, seenFd, cpus, slots);
    for (let round = 0; round < 2; round++) {
      const got = reader.read();
      expect(got.map((x) => x.port)).toEqual(ports.slice(0, 9));
      got.forEach((x, i) => expect([x.packets, x.bytes]).toEqual([sumOver(i + 1), 100 * sumOver(i + 1)]));
    }
    expect(batches).toBe(1);
  });
  it("the counters hash where the kernel has no batch lookup (before 5.6: EINVAL): walked key by key, the same samples as the batch reader's", () => {
    const hashFd = addon.bpfObjectMapFd(obj, MAP_COUNTERS);
    const keys = [30001, 30002, 30003].map((p) => counterKey(address16('10.0.0.99'), p, 17, 'loop_return', 'ingress'));
    keys.forEach((k, j) => {
      const v = Buffer.alloc(cpus * stride);
      for (let c = 0; c < cpus; c++) {
        v.writeBigUInt64LE(BigInt(j + 1 + c), c * stride);
        v.writeBigUInt64LE(BigInt(1000 * (j + 1 + c)), c * stride + 8);
      }
      addon.bpfMapUpdate(hashFd, k, v, 0);
    });
    let batches = 0;
    const old = Object.defineProperty(Object.create(addon) as typeof addon, 'bpfMapLookupBatch', {
      value: () => {
        batches++;
        throw Object.assign(new Error('bpf_map_lookup_batch: Invalid argument'), { errno: 22, code: 'EINVAL' });
      },
    });
    const byPort = (xs: ReturnType<CounterMapReader['read']>) => [...xs].sort((a, b) => a.port - b.port);
    const want = byPort(new CounterMapReader(addon, hashFd, cpus).read());
    expect(want.map((x) => [x.port, x.packets, x.bytes])).toEqual(
      [1, 2, 3].map((j) => [30000 + j, sumOver(j), 1000 * sumOver(j)]),
    );
    const reader = new CounterMapReader(old, hashFd, cpus);
    expect(byPort(reader.read())).toEqual(want);
    expect(byPort(reader.read())).toEqual(want);
    expect(batches).toBe(1);
    for (const k of keys) addon.bpfMapDelete(hashFd, k);
  });
});
