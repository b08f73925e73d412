// NodePort counter slots per address family (slotFamilies, src/capture/ebpf-maps.ts): a NodePort
// gets a slot for a family only when the node has a local source of that family outside
// link-local. At bench/agent.ts's 5,000 Services on an IPv4-only node (with the fe80:: address
// every link has) every key then has a slot (one slot a NodePort, not two, fits MAX_SLOTS), and a
// node that gains an IPv6 address gets the IPv6 slots, written into the NodePorts already held.
import { describe, expect, it } from 'vitest';
import { BENCH_NODE, syntheticCluster } from '../../../bench/agent-cluster.js';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import {
  decodeCounterKey,
  MAP_NODEPORTS,
  MAP_VIPS4,
  MAX_SLOTS,
  NODEPORT_SLOT_V4,
  NODEPORT_SLOT_V6,
  nodePortIndex,
  u32Value,
} from '../../../src/capture/bpf-layout.js';
import { FAMILY_V4, FAMILY_V6, slotFamilies, TARGET_MAPS, TargetSync } from '../../../src/capture/ebpf-maps.js';
import type { Targets } from '../../../src/capture/targets.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments } from '../../../src/cluster/file.js';
import type { BpfAddon } from '../../../src/native/bpf.js';
import { type FakeMaps, syncedMaps } from '../../support/fake-bpf-maps.js';

const prefixes = (...cidrs: string[]): Targets => ({
  vips: [],
  nodePorts: [],
  localPrefixes: cidrs.map((cidr) => ({ cidr, bound: true })),
});

/** bench/agent.ts's targets: its synthetic cluster's 5,000 LB Services seen from its node, whose uplink has an fe80:: address too. */
function benchTargets(): Targets {
  const { list } = syntheticCluster(5000, 20_000);
  const { objects } = classifyDocuments([list]);
  const view = buildClusterView(objects, { nodeName: BENCH_NODE.name });
  return new ServiceIndex(view, {
    nodeIps: [BENCH_NODE.ip, 'fe80::5054:ff:fe12:3456'],
    ipvsIps: [],
    podCidrs: [BENCH_NODE.podCidr],
  }).targets();
}

/** Each NodePort's [v4 slot, v6 slot] as the nodeports map holds them (an entry not there is zeros). */
function nodePortSlots(kernel: FakeMaps, t: Targets): number[][] {
  const proto = { tcp: 6, udp: 17, sctp: 132 } as const;
  return t.nodePorts.map((n) => {
    const v = kernel.value(MAP_NODEPORTS, u32Value(nodePortIndex(proto[n.proto], n.port))) ?? Buffer.alloc(4);
    return [v.readUInt16LE(NODEPORT_SLOT_V4), v.readUInt16LE(NODEPORT_SLOT_V6)];
  });
}

describe('NodePort slots per address family', () => {
  it('a family counts when the node has an address or pod CIDR of it outside link-local', () => {
    expect(slotFamilies(prefixes())).toBe(0);
    expect(slotFamilies(prefixes('10.0.0.1', 'fe80::1', 'fe80::/64'))).toBe(FAMILY_V4);
    expect(slotFamilies(prefixes('169.254.20.10', '169.254.0.0/16', 'fd00::1'))).toBe(FAMILY_V6);
    expect(slotFamilies(prefixes('10.244.1.0/24', 'fd00:244::/64'))).toBe(FAMILY_V4 | FAMILY_V6);
    // febf:: is inside fe80::/10, fec0:: outside; 169.255.0.1 is outside 169.254.0.0/16; a prefix wider than link-local is not link-local.
    expect(slotFamilies(prefixes('febf::1'))).toBe(0);
    expect(slotFamilies(prefixes('fec0::1'))).toBe(FAMILY_V6);
    expect(slotFamilies(prefixes('169.255.0.1'))).toBe(FAMILY_V4);
    expect(slotFamilies(prefixes('fe80::/9', '169.254.0.0/15'))).toBe(FAMILY_V4 | FAMILY_V6);
  });

  it("bench/agent.ts's 5,000 Services on an IPv4-only node: every VIP and NodePort key has a slot", () => {
    const t = benchTargets();
    expect([t.vips.length, t.nodePorts.length]).toEqual([6667, 9167]);
    const { kernel, sync } = syncedMaps([t]);
    const slots = sync.slots;
    // One slot per VIP entry and per NodePort (IPv4), slot 0 unused: 15,835 of MAX_SLOTS.
    expect(slots.used).toBe(1 + 6667 + 9167);
    expect(slots.used).toBeLessThanOrEqual(MAX_SLOTS);
    const vipSlots = kernel.values(MAP_VIPS4).map((v) => v.readUInt32LE(0));
    expect(vipSlots.filter((s) => s === 0)).toHaveLength(0);
    const np = nodePortSlots(kernel, t);
    expect(np.filter(([v4]) => v4 === 0)).toHaveLength(0);
    expect(np.filter(([, v6]) => v6 !== 0)).toHaveLength(0);
    // Every slot counts its own key: the last NodePort's IPv4 loop_return.
    const last = t.nodePorts.at(-1)!;
    expect(decodeCounterKey(slots.keyOf(np.at(-1)![0]!), 0)).toEqual({
      target: '0.0.0.0',
      port: last.port,
      proto: last.proto,
      kind: 'loop_return',
      direction: 'ingress',
    });
  });

  it('a node that gains an IPv6 address gets IPv6 NodePort slots, written into the NodePorts it holds', () => {
    const written = new Map<string, string>();
    const fds = Object.fromEntries(TARGET_MAPS.map((m, i) => [m, 100 + i]));
    const addon = {
      bpfMapUpdate: (fd: number, key: Uint8Array, value: Uint8Array) => {
        if (fd === fds[MAP_NODEPORTS])
          written.set(Buffer.from(key).toString('hex'), Buffer.from(value).toString('hex'));
      },
      bpfMapDelete: () => true,
    } as unknown as BpfAddon;
    const sync = new TargetSync(addon, fds);
    const nodePorts: Targets['nodePorts'] = [
      { port: 30080, proto: 'tcp' },
      { port: 30081, proto: 'udp' },
    ];
    const v4Only: Targets = {
      vips: [],
      nodePorts,
      localPrefixes: [
        { cidr: '10.0.0.1', bound: true },
        { cidr: 'fe80::1', bound: true },
        { cidr: '10.244.1.0/24', bound: false },
      ],
    };
    const slotsOf = () =>
      nodePorts.map((n) =>
        Buffer.from(
          written.get(Buffer.from(u32Value(nodePortIndex(n.proto === 'tcp' ? 6 : 17, n.port))).toString('hex'))!,
          'hex',
        ),
      );
    sync.sync(v4Only);
    expect(sync.slots.used).toBe(3);
    expect(slotsOf().map((v) => [v.readUInt16LE(NODEPORT_SLOT_V4), v.readUInt16LE(NODEPORT_SLOT_V6)])).toEqual([
      [1, 0],
      [2, 0],
    ]);
    // The same again: nothing new to write.
    written.clear();
    sync.sync(v4Only);
    expect(written.size).toBe(0);
    // A global IPv6 address: both NodePorts (held, unchanged as targets) get an IPv6 slot.
    sync.sync({ ...v4Only, localPrefixes: [...v4Only.localPrefixes, { cidr: '2001:db8::1', bound: true }] });
    expect(sync.slots.used).toBe(5);
    const after = slotsOf();
    expect(after.map((v) => [v.readUInt16LE(NODEPORT_SLOT_V4), v.readUInt16LE(NODEPORT_SLOT_V6)])).toEqual([
      [1, 3],
      [2, 4],
    ]);
    expect(decodeCounterKey(sync.slots.keyOf(3), 0)).toEqual({
      target: '::',
      port: 30080,
      proto: 'tcp',
      kind: 'loop_return',
      direction: 'ingress',
    });
    // The address goes again: the slots stay (a slot never changes key), nothing is rewritten.
    written.clear();
    sync.sync(v4Only);
    expect(written.size).toBe(0);
    expect(sync.slots.used).toBe(5);
  });
});
