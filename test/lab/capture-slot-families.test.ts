// NodePort slots per address family on the real kernel (slotFamilies, src/capture/ebpf-maps.ts):
// a node whose only IPv6 address is link-local has no IPv6 NodePort slots, and a packet from
// such a source to a NodePort is counted exactly in the `counters` hash; once the node has a
// global IPv6 address the NodePorts already written get their IPv6 slots, later packets are
// counted there, and a reading adds both up. The agent's own pieces (object, attach, TargetSync,
// both readers) are put together here as EbpfCounter does, so that the hash and the slots can be
// read apart.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Attachment, attachPrograms } from '../../src/capture/attach.js';
import { MAP_COUNTERS, MAP_SLOTS, MAP_SLOTS_SEEN, PROG_EGRESS, PROG_INGRESS } from '../../src/capture/bpf-layout.js';
import { bpfObjectPath, CounterMapReader, mergeSamples, SlotMapReader } from '../../src/capture/ebpf.js';
import { TARGET_MAPS, TargetSync } from '../../src/capture/ebpf-maps.js';
import type { CounterSample, Targets } from '../../src/capture/targets.js';
import { type BpfObject, bpfAddon } from '../../src/native/bpf.js';
import { isRoot } from '../support/netns.js';
import { expectCounters, merge } from './capture-expect.js';
import { CaptureLab, type Expected, labTargets, PAYLOAD, PORTS, sendScenario, UPLINK, V4, V6 } from './capture-lab.js';

/** A link-local source on the peer that the node's targets take as bound (as an LB's health checks from a node's fe80:: would be). */
const LINK_LOCAL = 'fe80::cb:5';

describe.skipIf(!isRoot)('NodePort slots per address family (real kernel, namespaces cbx-sf-*)', () => {
  const addon = bpfAddon();
  let lab: CaptureLab;
  let obj: BpfObject | undefined;
  let attachment: Attachment | undefined;

  beforeAll(() => {
    lab = new CaptureLab('cbx-sf');
    lab.peer.sh(`ip addr add ${LINK_LOCAL}/64 dev cbe1 nodad`);
  });
  afterAll(() => {
    attachment?.detach();
    if (obj) addon.bpfObjectClose(obj);
    lab?.destroy();
  });

  it('counts a NodePort in the hash while IPv6 is link-local only, in its new slot once the node has a global address', () => {
    obj = addon.bpfObjectOpen(bpfObjectPath());
    addon.bpfObjectLoad(obj);
    const fds = Object.fromEntries(
      [...TARGET_MAPS, MAP_COUNTERS, MAP_SLOTS, MAP_SLOTS_SEEN].map((m) => [m, addon.bpfObjectMapFd(obj!, m)]),
    );
    const progs = {
      [PROG_INGRESS]: addon.bpfObjectProgFd(obj, PROG_INGRESS),
      [PROG_EGRESS]: addon.bpfObjectProgFd(obj, PROG_EGRESS),
    };
    attachment = attachPrograms(addon, progs, { ifname: UPLINK, netnsPath: lab.nodeNetns }, 'tcx');
    const cpus = addon.bpfPossibleCpus();
    const sync = new TargetSync(addon, fds);
    const hash = new CounterMapReader(addon, fds[MAP_COUNTERS]!, cpus);
    const slots = new SlotMapReader(addon, fds[MAP_SLOTS]!, fds[MAP_SLOTS_SEEN]!, cpus, sync.slots);
    const reading = () => {
      const h = hash.read();
      const s = slots.read();
      return {
        hash: h,
        slots: s,
        all: {
          backend: 'ebpf' as const,
          counters: mergeSamples(h, s),
          seen: { ingress: 0, egress: 0 },
          drops: { counterMapFull: 0, captureBuffer: 0, interface: 0 },
        },
      };
    };
    const nodePortSamples = (xs: CounterSample[]) =>
      xs
        .filter((x) => x.kind === 'loop_return' && (x.target === '0.0.0.0' || x.target === '::'))
        .map((x) => `${x.target} ${x.port}/${x.proto} ${x.packets}`)
        .sort();

    // IPv4 and a link-local IPv6 address: NodePort slots for IPv4 only.
    const v4: Targets = labTargets([V4]);
    v4.localPrefixes.push({ cidr: LINK_LOCAL, bound: true });
    sync.sync(v4);
    expect(sync.slots.used).toBe(1 + v4.vips.length + v4.nodePorts.length);
    const fromLinkLocal = (count: number) =>
      lab.send('peer', [
        { proto: 'udp', src: `${LINK_LOCAL}%cbe1`, dst: V6.nodeIp, port: PORTS.nodePortUdp, count, payload: PAYLOAD },
      ]);
    const linkLocal = (n: number): Expected[] => [
      {
        target: '::',
        port: PORTS.nodePortUdp,
        proto: 'udp',
        kind: 'loop_return',
        packets: n,
        bytes: n * (V6.udpOverhead + PAYLOAD),
      },
      {
        target: LINK_LOCAL,
        port: PORTS.nodePortUdp,
        proto: 'udp',
        kind: 'hc_local_src',
        packets: n,
        bytes: n * (V6.udpOverhead + PAYLOAD),
      },
    ];
    const first = sendScenario(lab, V4);
    fromLinkLocal(3);
    let r = reading();
    expectCounters(r.all, merge(first, linkLocal(3)));
    expect(nodePortSamples(r.hash)).toEqual([`:: ${PORTS.nodePortUdp}/udp 3`]);
    expect(nodePortSamples(r.slots)).toEqual(
      [`0.0.0.0 ${PORTS.nodePortTcp}/tcp 2`, `0.0.0.0 ${PORTS.nodePortUdp}/udp 4`].sort(),
    );

    // A global IPv6 address (and the rest of the lab's IPv6 targets): the NodePorts, unchanged,
    // get IPv6 slots; what the hash counted stays and adds to what the slot counts from now on.
    const both = labTargets();
    both.localPrefixes.push({ cidr: LINK_LOCAL, bound: true });
    sync.sync(both);
    const second = sendScenario(lab, V6);
    fromLinkLocal(2);
    r = reading();
    expectCounters(r.all, merge(first, linkLocal(3), second, linkLocal(2)));
    expect(nodePortSamples(r.hash)).toEqual([`:: ${PORTS.nodePortUdp}/udp 3`]);
    expect(nodePortSamples(r.slots)).toEqual(
      [
        `0.0.0.0 ${PORTS.nodePortTcp}/tcp 2`,
        `0.0.0.0 ${PORTS.nodePortUdp}/udp 4`,
        `:: ${PORTS.nodePortTcp}/tcp 2`,
        `:: ${PORTS.nodePortUdp}/udp 6`,
      ].sort(),
    );
  });
});
