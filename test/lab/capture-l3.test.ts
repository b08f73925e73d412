// eBPF counters on an L3 uplink (frames start with the IP header: tun, WireGuard, IP-in-IP), on
// the real kernel. The kernel here has no ipip/sit/gre/WireGuard (not built, no modules), but
// tun: a persistent tun device in a test namespace, up, with no reader attached (NO-CARRIER),
// still runs tc egress for the packets routed out of it (they are dropped after it); packets
// written into it by test/support/tun-inject.py come in through tc ingress. The agent's
// EbpfCounter chooses the object by the link type rtnetlink gives in that namespace, as on a
// node: the L3 object must count exactly what was sent (the Ethernet one counts nothing there).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EbpfCounter } from '../../src/capture/ebpf.js';
import { bpfAddon } from '../../src/native/bpf.js';
import { isRoot, Netns } from '../support/netns.js';
import { expectCounters, merge, settledReading } from './capture-expect.js';
import { type Family as EthernetFamily, type Expected, labTargets, PORTS } from './capture-lab.js';
import { oracleCounters, sortedCounts } from './capture-oracle.js';
import type { Send } from './capture-sender.js';

const TUN = 'cbl3';
const PAYLOAD = 100;

/** The Ethernet lab's family (capture-lab.ts), with the IP header's bytes instead of its frame overhead (no L2 header on this link). */
type Family = Omit<EthernetFamily, 'udpOverhead'> & { ip: number };

const V4: Family = {
  nodeIp: '10.78.0.1',
  peerIp: '10.78.0.2',
  vip: '10.78.9.9',
  podSrc: '10.244.3.5',
  localPod: '10.244.3.9',
  podCidr: '10.244.3.0/24',
  boundSrc: '10.78.5.5',
  ip: 20,
};
const V6: Family = {
  nodeIp: 'fd78::1',
  peerIp: 'fd78::2',
  vip: 'fd78:9::9',
  podSrc: 'fd44:3::5',
  localPod: 'fd44:3::9',
  podCidr: 'fd44:3::/64',
  boundSrc: 'fd78:5::5',
  ip: 40,
};

/** Runs a script of test/lab or test/support in the namespace; throws unless every packet went out. */
function run(ns: Netns, argv: string[], plan: Send[]): void {
  const r = spawnSync('ip', ['netns', 'exec', ns.name, ...argv, JSON.stringify(plan)], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  if (r.status !== 0) throw new Error(`${argv.join(' ')} in ${ns.name} failed (${r.status}): ${r.stderr.trim()}`);
  const { done } = JSON.parse(r.stdout) as { done: number[] };
  if (done.join() !== plan.map((p) => p.count).join())
    throw new Error(`${argv.join(' ')} sent ${done} of ${plan.map((p) => p.count)}`);
}

const sender = fileURLToPath(new URL('./capture-sender.ts', import.meta.url));
const injector = fileURLToPath(new URL('../support/tun-inject.py', import.meta.url));

/**
 * One family's traffic, matching and not: UDP from the node out of the tun (its own stack; TCP
 * would wait for answers that never come), and packets in through it; returns what it must count,
 * after checking that the ours rule for packets (the oracle) counts the same.
 */
function scenario(ns: Netns, f: Family): Expected[] {
  const out: Send[] = [
    { proto: 'udp', src: f.nodeIp, dst: f.vip, port: PORTS.vipUdp, count: 5, payload: PAYLOAD },
    // Not counted: a VIP on a port not in the set, a remote address.
    { proto: 'udp', src: f.nodeIp, dst: f.vip, port: PORTS.vipOtherUdp, count: 4, payload: PAYLOAD },
    { proto: 'udp', src: f.nodeIp, dst: f.peerIp, port: PORTS.vipUdp, count: 4, payload: PAYLOAD },
  ];
  const into: Send[] = [
    { proto: 'udp', src: f.podSrc, dst: f.nodeIp, port: PORTS.nodePortUdp, count: 4, payload: PAYLOAD },
    { proto: 'tcp', src: f.podSrc, dst: f.nodeIp, port: PORTS.nodePortTcp, count: 2 },
    { proto: 'udp', src: f.podSrc, dst: f.localPod, port: PORTS.podUdp, count: 3, payload: PAYLOAD },
    { proto: 'tcp', src: f.boundSrc, dst: f.nodeIp, port: PORTS.healthTcp, count: 2 },
    // Not counted: a remote source to a NodePort and to a local pod.
    { proto: 'udp', src: f.peerIp, dst: f.nodeIp, port: PORTS.nodePortUdp, count: 4, payload: PAYLOAD },
    { proto: 'udp', src: f.peerIp, dst: f.localPod, port: PORTS.podUdp, count: 4, payload: PAYLOAD },
  ];
  run(ns, [process.execPath, '--import', 'tsx', sender], out);
  run(ns, ['/usr/bin/python3', injector, TUN], into);
  const udp = (n: number) => ({ packets: n, bytes: n * (f.ip + 8 + PAYLOAD) });
  const syn = (n: number) => ({ packets: n, bytes: n * (f.ip + 20) });
  const any = f === V4 ? '0.0.0.0' : '::';
  const want: Expected[] = [
    { target: f.vip, port: PORTS.vipUdp, proto: 'udp', kind: 'to_lb', ...udp(5) },
    { target: any, port: PORTS.nodePortUdp, proto: 'udp', kind: 'loop_return', ...udp(4) },
    { target: any, port: PORTS.nodePortTcp, proto: 'tcp', kind: 'loop_return', ...syn(2) },
    { target: f.localPod, port: PORTS.podUdp, proto: 'udp', kind: 'loop_return', ...udp(3) },
    { target: f.boundSrc, port: PORTS.healthTcp, proto: 'tcp', kind: 'hc_local_src', ...syn(2) },
  ];
  const oracle = oracleCounters(labTargets([V4, V6]), [
    ['egress', out],
    ['ingress', into],
  ]);
  expect(sortedCounts(oracle)).toEqual(sortedCounts(want));
  return want;
}

describe.skipIf(!isRoot)('eBPF counters on an L3 uplink (tun; real kernel, namespaces cbx-l3*)', () => {
  let ns: Netns;
  const open: EbpfCounter[] = [];

  beforeAll(() => {
    ns = Netns.create('cbx-l3');
  });
  afterEach(() => {
    for (const c of open.splice(0)) c.close();
  });
  afterAll(() => ns?.delete());

  /** A new persistent tun named TUN (the one before deleted), up, with the node's addresses and the VIPs routed out of it. */
  function tun(): void {
    ns.sh(`
      ip link del ${TUN} 2>/dev/null || true
      ip tuntap add dev ${TUN} mode tun
      ip link set ${TUN} up
      ip addr add ${V4.nodeIp}/24 dev ${TUN}
      ip addr add ${V6.nodeIp}/64 dev ${TUN} nodad
      ip route add ${V4.vip}/32 dev ${TUN}
      ip -6 route add ${V6.vip}/128 dev ${TUN}`);
  }

  for (const mode of ['tcx', 'tc'] as const) {
    it(`counts exactly what was sent (${mode}, v4 + v6, tcp + udp)`, async () => {
      tun();
      expect(ns.run('cat', `/sys/class/net/${TUN}/type`).trim()).toBe('65534'); // ARPHRD_NONE: no L2 header
      const c = EbpfCounter.open({ ifname: TUN, netnsPath: ns.path, attach: mode });
      open.push(c);
      expect(c.attachMode).toBe(mode);
      c.setTargets(labTargets([V4, V6]));
      const want = merge(scenario(ns, V4), scenario(ns, V6));
      const r = await settledReading(c, want);
      expectCounters(r, want);
      expect(r.drops.counterMapFull).toBe(0);
    });
  }

  it('a re-created uplink of another link type is not attached to, and the reason says so', async () => {
    tun();
    const c = EbpfCounter.open({ ifname: TUN, netnsPath: ns.path, attach: 'tcx' });
    open.push(c);
    c.setTargets(labTargets([V4, V6]));
    const want = scenario(ns, V4);
    expectCounters(await settledReading(c, want), want);
    // The same name, now an Ethernet link (a veth): the L3 program would read it 14 bytes off.
    ns.sh(`
      ip link del ${TUN}
      ip link add ${TUN} type veth peer name ${TUN}p
      ip link set ${TUN} up`);
    const r = c.read();
    expect(c.stopped).toMatch(
      new RegExp(`the new ${TUN} \\(ifindex \\d+\\) is of another link type \\(ARPHRD 1: Ethernet\\)`),
    );
    expectCounters(r, want);
    expect(bpfAddon().bpfTcxQuery(TUN, false, ns.path)).toEqual([]);
  });
});
