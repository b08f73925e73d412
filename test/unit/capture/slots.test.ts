// Counter slots (src/capture/ebpf-maps.ts): which key a VIP entry's and a NodePort's slot
// counts, that a key keeps its slot and a slot its key for the life of the agent (so the
// per-CPU sums stay monotonic), that running out gives 0 (the program then counts in the hash),
// and that a reading has one sample per key.
import { describe, expect, it } from 'vitest';
import {
  counterKey,
  decodeCounterKey,
  MAP_NODEPORTS,
  MAP_VIPS4,
  MAP_VIPS6,
  NODEPORT_SLOT_V4,
  NODEPORT_SLOT_V6,
  nodePortIndex,
  u32Value,
  vipKey,
} from '../../../src/capture/bpf-layout.js';
import { mergeSamples } from '../../../src/capture/ebpf.js';
import { SlotAllocator } from '../../../src/capture/ebpf-maps.js';
import { address16, type Targets } from '../../../src/capture/targets.js';
import { syncedMaps } from '../../support/fake-bpf-maps.js';

const targets = (vips: Targets['vips'], nodePorts: Targets['nodePorts']): Targets => ({
  vips,
  nodePorts,
  // Both families: a NodePort gets a slot per family the node has local sources of.
  localPrefixes: [
    { cidr: '10.244.1.0/24', bound: false },
    { cidr: 'fd00:244::/64', bound: false },
  ],
});

const slotKey = (a: SlotAllocator, slot: number) => decodeCounterKey(a.keyOf(slot), 0);

describe('counter slots', () => {
  it('a VIP entry holds the slot of its to_lb key, a NodePort one per family for loop_return', () => {
    const { kernel, sync } = syncedMaps([
      targets(
        [
          { address: '10.0.0.100', port: 80, proto: 'tcp' },
          { address: '2001:db8::100', port: 0, proto: 'udp' },
        ],
        [{ port: 30080, proto: 'tcp' }],
      ),
    ]);
    const slots = sync.slots;
    const v4 = kernel.value(MAP_VIPS4, vipKey('10.0.0.100', 80, 'tcp').key)!.readUInt32LE(0);
    const v6 = kernel.value(MAP_VIPS6, vipKey('2001:db8::100', 0, 'udp').key)!.readUInt32LE(0);
    expect(slotKey(slots, v4)).toEqual({
      target: '10.0.0.100',
      port: 80,
      proto: 'tcp',
      kind: 'to_lb',
      direction: 'egress',
    });
    expect(slotKey(slots, v6)).toEqual({
      target: '2001:db8::100',
      port: 0,
      proto: 'udp',
      kind: 'to_lb',
      direction: 'egress',
    });
    const np = kernel.value(MAP_NODEPORTS, u32Value(nodePortIndex(6, 30080)))!;
    expect(slotKey(slots, np.readUInt16LE(NODEPORT_SLOT_V4))).toEqual({
      target: '0.0.0.0',
      port: 30080,
      proto: 'tcp',
      kind: 'loop_return',
      direction: 'ingress',
    });
    expect(slotKey(slots, np.readUInt16LE(NODEPORT_SLOT_V6))).toEqual({
      target: '::',
      port: 30080,
      proto: 'tcp',
      kind: 'loop_return',
      direction: 'ingress',
    });
    expect(new Set([v4, v6, np.readUInt16LE(0), np.readUInt16LE(2)]).size).toBe(4);
    expect(slots.used).toBe(5);
  });

  it('a key keeps its slot after its target went and came back; a new key never takes a used slot', () => {
    const { kernel, sync } = syncedMaps([]);
    const vip = (port: number) => ({ address: '10.0.0.100', port, proto: 'tcp' as const });
    const slotOf = (port: number) => kernel.value(MAP_VIPS4, vipKey('10.0.0.100', port, 'tcp').key)!.readUInt32LE(0);
    sync.sync(targets([vip(80)], []));
    const a = slotOf(80);
    sync.sync(targets([vip(443)], []));
    const b = slotOf(443);
    sync.sync(targets([vip(80), vip(8080)], []));
    expect(slotOf(80)).toBe(a);
    expect(slotOf(8080)).not.toBe(a);
    expect(slotOf(8080)).not.toBe(b);
    expect(sync.slots.used).toBe(4);
  });

  it('when the slots run out, new keys get 0 (counted in the hash) and keep getting it', () => {
    const slots = new SlotAllocator(3);
    const key = (port: number) => counterKey(address16('10.0.0.1'), port, 6, 'to_lb', 'egress');
    expect([slots.slot(key(1)), slots.slot(key(2)), slots.slot(key(3)), slots.slot(key(1))]).toEqual([1, 2, 0, 1]);
    expect(slots.slot(key(3))).toBe(0);
    expect(slots.used).toBe(3);
  });

  it('merges the hash and slot readings into one sample per key', () => {
    const s = (target: string, packets: number) => ({
      target,
      port: 80,
      proto: 'tcp' as const,
      kind: 'to_lb' as const,
      direction: 'egress' as const,
      packets,
      bytes: packets * 60,
    });
    expect(mergeSamples([s('10.0.0.1', 2), s('10.0.0.2', 1)], [s('10.0.0.1', 3)])).toEqual([
      s('10.0.0.1', 5),
      s('10.0.0.2', 1),
    ]);
    const only = [s('10.0.0.1', 2)];
    expect(mergeSamples(only, [])).toBe(only);
  });
});
