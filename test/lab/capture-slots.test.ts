// The counter slots' reader on the real kernel: the program's own `slots` per-CPU array (loaded,
// not attached: no packet, no namespace), values written per CPU, read back by SlotMapReader in
// batches smaller than the slots handed out, each slot summed over CPUs under its counter key.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { counterKey, COUNTER_VALUE_SIZE, MAP_SLOTS } from '../../src/capture/bpf-layout.js';
import { bpfObjectPath } from '../../src/capture/ebpf.js';
import { perCpuStride, SlotAllocator, SlotMapReader } from '../../src/capture/ebpf-maps.js';
import { address16 } from '../../src/capture/targets.js';
import { bpfAddon, type BpfObject } from '../../src/native/bpf.js';
import { isRoot } from '../support/netns.js';

describe.skipIf(!isRoot)('counter slots on the real kernel', () => {
  const addon = bpfAddon();
  let obj: BpfObject;
  let fd: number;
  const cpus = addon.bpfPossibleCpus();
  const stride = perCpuStride(COUNTER_VALUE_SIZE);

  beforeAll(() => {
    obj = addon.bpfObjectOpen(bpfObjectPath());
    addon.bpfObjectLoad(obj);
    fd = addon.bpfObjectMapFd(obj, MAP_SLOTS);
  });
  afterAll(() => {
    if (obj) addon.bpfObjectClose(obj);
  });

  /** Writes slot's per-CPU values: CPU c holds packets = slot + c, bytes = 100 * (slot + c). */
  function fill(slot: number): void {
    const key = Buffer.alloc(4);
    key.writeUInt32LE(slot);
    const v = Buffer.alloc(cpus * stride);
    for (let c = 0; c < cpus; c++) {
      v.writeBigUInt64LE(BigInt(slot + c), c * stride);
      v.writeBigUInt64LE(BigInt(100 * (slot + c)), c * stride + 8);
    }
    addon.bpfMapUpdate(fd, key, v, 0);
  }

  it('reads every slot handed out, in batches, under its key; unused and zero slots give no sample', () => {
    const slots = new SlotAllocator();
    const ports = Array.from({ length: 10 }, (_, i) => 30000 + i);
    for (const p of ports) slots.slot(counterKey(address16('10.0.0.100'), p, 6, 'to_lb', 'egress'));
    // Slots 1..10 are handed out; 1..9 counted, 10 did not; 11 (never handed out) holds a stray value.
    for (let s = 1; s <= 9; s++) fill(s);
    fill(11);
    const sumOver = (s: number) => Array.from({ length: cpus }, (_, c) => s + c).reduce((a, b) => a + b, 0);
    for (const batch of [3, 4096]) {
      const got = new SlotMapReader(addon, fd, cpus, slots, batch).read();
      expect(got.map((x) => x.port), `batch ${batch}`).toEqual(ports.slice(0, 9));
      got.forEach((x, i) => {
        expect(x).toMatchObject({ target: '10.0.0.100', proto: 'tcp', kind: 'to_lb', direction: 'egress' });
        expect(x.packets).toBe(sumOver(i + 1));
        expect(x.bytes).toBe(100 * sumOver(i + 1));
      });
    }
  });
});
