// Two namespaces for the capture tests: "node" (where the counters attach, on
// its uplink cbe0) and "peer" (the rest of the VPC and the LB), joined by a
// veth. The peer owns the addresses that, from the node's point of view, are
// the LB VIP, local pod sources (a looped-back pod connection) and a bound
// address (an LB IP bound on kube-ipvs0 used as a health-check source).
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { CounterReading, Targets } from '../../src/capture/targets.js';
import { Netns, vethPair } from '../support/netns.js';
import type { Send } from './capture-sender.js';

export const UPLINK = 'cbe0';

export interface Family {
  nodeIp: string;
  peerIp: string;
  vip: string;
  /** Source on the peer that lies in the node's pod CIDR. */
  podSrc: string;
  /** A pod address on the node (a looped connection's destination). */
  localPod: string;
  podCidr: string;
  /** Source on the peer that is an address bound on the node. */
  boundSrc: string;
  /** UDP frame overhead: Ethernet + IP + UDP headers. */
  udpOverhead: number;
}

export const V4: Family = {
  nodeIp: '10.77.0.1',
  peerIp: '10.77.0.2',
  vip: '10.77.9.9',
  podSrc: '10.244.1.5',
  localPod: '10.244.1.9',
  podCidr: '10.244.1.0/24',
  boundSrc: '10.77.5.5',
  udpOverhead: 14 + 20 + 8,
};

export const V6: Family = {
  nodeIp: 'fd77::1',
  peerIp: 'fd77::2',
  vip: 'fd77:9::9',
  podSrc: 'fd44:1::5',
  localPod: 'fd44:1::9',
  podCidr: 'fd44:1::/64',
  boundSrc: 'fd77:5::5',
  udpOverhead: 14 + 40 + 8,
};

export const PORTS = {
  vipUdp: 80,
  vipOtherUdp: 81,
  vipTcp: 443,
  nodePortUdp: 30080,
  nodePortTcp: 30443,
  podUdp: 8080,
  healthTcp: 10256,
};
export const PAYLOAD = 100;

/** The node's view: VIP udp/80 and tcp/any, its own IP and the bound address, the pod CIDR, two NodePorts. */
export function labTargets(
  fams: readonly Pick<Family, 'vip' | 'nodeIp' | 'boundSrc' | 'podCidr'>[] = [V4, V6],
): Targets {
  return {
    vips: fams.flatMap((f) => [
      { address: f.vip, port: PORTS.vipUdp, proto: 'udp' as const },
      { address: f.vip, port: 0, proto: 'tcp' as const },
    ]),
    localPrefixes: fams.flatMap((f) => [
      { cidr: f.nodeIp, bound: true },
      { cidr: f.boundSrc, bound: true },
      { cidr: f.podCidr, bound: false },
    ]),
    nodePorts: [
      { port: PORTS.nodePortUdp, proto: 'udp' },
      { port: PORTS.nodePortTcp, proto: 'tcp' },
    ],
  };
}

export class CaptureLab {
  readonly node: Netns;
  readonly peer: Netns;

  /**
   * `prefix`: of the namespaces' names, so that tests running side by side can tell theirs apart
   * (CLBPROBE_LAB_NETNS, when set, for the tests that take the default).
   */
  constructor(prefix = process.env.CLBPROBE_LAB_NETNS ?? 'cbe') {
    this.node = Netns.create(`${prefix}-n`);
    try {
      this.peer = Netns.create(`${prefix}-p`);
      // Addresses on lo outlive the uplink; wireUplink() adds the rest.
      this.node.sh(`
        ip addr add ${V4.localPod}/32 dev lo
        ip addr add ${V6.localPod}/128 dev lo nodad`);
      this.peer.sh(`
        for a in ${V4.vip} ${V4.podSrc} ${V4.boundSrc}; do ip addr add $a/32 dev lo; done
        for a in ${V6.vip} ${V6.podSrc} ${V6.boundSrc}; do ip addr add $a/128 dev lo nodad; done`);
      this.wireUplink();
    } catch (e) {
      this.destroy();
      throw e;
    }
  }

  /**
   * The veth between the namespaces with its addresses and routes. Again after deleteUplink(): a
   * re-created uplink (a driver reload) with the same name and addresses, under a new ifindex.
   */
  wireUplink(): void {
    vethPair(this.node, UPLINK, this.peer, 'cbe1');
    this.node.sh(`
        ip addr add ${V4.nodeIp}/24 dev ${UPLINK}
        ip addr add ${V6.nodeIp}/64 dev ${UPLINK} nodad
        ip route add default via ${V4.peerIp}
        ip -6 route add default via ${V6.peerIp}`);
    this.peer.sh(`
        ip addr add ${V4.peerIp}/24 dev cbe1
        ip addr add ${V6.peerIp}/64 dev cbe1 nodad
        ip route add ${V4.localPod}/32 via ${V4.nodeIp}
        ip -6 route add ${V6.localPod}/128 via ${V6.nodeIp}`);
    // Resolve neighbours now, so that no test packet waits in an ARP/ND queue.
    this.send(
      'node',
      [V4, V6].map((f) => ({ proto: 'udp', src: f.nodeIp, dst: f.peerIp, port: 9, count: 1 })),
    );
    this.send(
      'peer',
      [V4, V6].map((f) => ({ proto: 'udp', src: f.peerIp, dst: f.nodeIp, port: 9, count: 1 })),
    );
  }

  /** Deletes the uplink veth (both ends), as a driver unload does. */
  deleteUplink(): void {
    this.node.run('ip', 'link', 'del', UPLINK);
  }

  /** The uplink's ifindex in the node namespace. */
  uplinkIndex(): number {
    return Number(this.node.run('cat', `/sys/class/net/${UPLINK}/ifindex`).trim());
  }

  get nodeNetns(): string {
    return this.node.path;
  }

  /** Runs test/lab/capture-sender.ts in one namespace; throws unless every packet went out. */
  send(where: 'node' | 'peer', plan: Send[]): void {
    const ns = where === 'node' ? this.node : this.peer;
    const script = fileURLToPath(new URL('./capture-sender.ts', import.meta.url));
    const r = spawnSync(
      'ip',
      ['netns', 'exec', ns.name, process.execPath, '--import', 'tsx', script, JSON.stringify(plan)],
      {
        encoding: 'utf8',
        // tsx's start-up alone can take tens of seconds on a loaded 2-core CI machine.
        timeout: 50_000,
      },
    );
    if (r.status !== 0) throw new Error(`sender in ${ns.name} failed (${r.status ?? r.signal}): ${r.stderr.trim()}`);
    const { done } = JSON.parse(r.stdout) as { done: number[] };
    if (done.join() !== plan.map((p) => p.count).join())
      throw new Error(`sender sent ${done} of ${plan.map((p) => p.count)}`);
  }

  /** `tc filter show` on the node's uplink, both hooks. */
  tcFilters(): string {
    return ['ingress', 'egress']
      .map((h) => this.node.run('tc', 'filter', 'show', 'dev', UPLINK, h))
      .join('')
      .trim();
  }

  destroy(): void {
    this.node?.delete();
    this.peer?.delete();
  }
}

export interface Expected {
  target: string;
  port: number;
  proto: 'tcp' | 'udp';
  kind: 'to_lb' | 'loop_return' | 'hc_local_src';
  packets: number;
  /** Exact bytes when known (UDP); TCP SYN sizes depend on options. */
  bytes?: number;
}

/**
 * Sends one family's scenario (matching and non-matching traffic, both ways)
 * `times` times and returns the counters it must produce.
 */
export function sendScenario(lab: CaptureLab, f: Family, times = 1): Expected[] {
  const udp = (n: number) => ({ packets: n * times, bytes: n * times * (f.udpOverhead + PAYLOAD) });
  lab.send('node', [
    { proto: 'udp', src: f.nodeIp, dst: f.vip, port: PORTS.vipUdp, count: 5 * times, payload: PAYLOAD },
    { proto: 'tcp', src: f.nodeIp, dst: f.vip, port: PORTS.vipTcp, count: 3 * times },
    // Not counted: VIP on a port not in the set, and a plain peer address.
    { proto: 'udp', src: f.nodeIp, dst: f.vip, port: PORTS.vipOtherUdp, count: 4 * times, payload: PAYLOAD },
    { proto: 'udp', src: f.nodeIp, dst: f.peerIp, port: PORTS.vipUdp, count: 4 * times, payload: PAYLOAD },
  ]);
  lab.send('peer', [
    { proto: 'udp', src: f.podSrc, dst: f.nodeIp, port: PORTS.nodePortUdp, count: 4 * times, payload: PAYLOAD },
    { proto: 'tcp', src: f.podSrc, dst: f.nodeIp, port: PORTS.nodePortTcp, count: 2 * times },
    { proto: 'udp', src: f.podSrc, dst: f.localPod, port: PORTS.podUdp, count: 3 * times, payload: PAYLOAD },
    { proto: 'tcp', src: f.boundSrc, dst: f.nodeIp, port: PORTS.healthTcp, count: 2 * times },
    // Not counted: a remote source to a NodePort and to a local pod.
    { proto: 'udp', src: f.peerIp, dst: f.nodeIp, port: PORTS.nodePortUdp, count: 4 * times, payload: PAYLOAD },
    { proto: 'udp', src: f.peerIp, dst: f.localPod, port: PORTS.podUdp, count: 4 * times, payload: PAYLOAD },
  ]);
  const any = f === V4 ? '0.0.0.0' : '::';
  return [
    { target: f.vip, port: PORTS.vipUdp, proto: 'udp', kind: 'to_lb', ...udp(5) },
    { target: f.vip, port: 0, proto: 'tcp', kind: 'to_lb', packets: 3 * times },
    { target: any, port: PORTS.nodePortUdp, proto: 'udp', kind: 'loop_return', ...udp(4) },
    { target: any, port: PORTS.nodePortTcp, proto: 'tcp', kind: 'loop_return', packets: 2 * times },
    { target: f.localPod, port: PORTS.podUdp, proto: 'udp', kind: 'loop_return', ...udp(3) },
    { target: f.boundSrc, port: PORTS.healthTcp, proto: 'tcp', kind: 'hc_local_src', packets: 2 * times },
  ];
}

export interface AgentHello {
  backend?: 'ebpf' | 'pcap';
  description?: string;
  attach?: 'tcx' | 'tc';
  fallbackReason?: string;
  warnings: string[];
  error?: string;
}

/** test/lab/capture-agent.ts running as a separate process. */
export interface Agent {
  child: ChildProcess;
  hello: AgentHello;
  read(): Promise<CounterReading>;
  kill(): Promise<void>;
}

/**
 * Starts the stand-in agent. With `inside`, it runs inside the node namespace
 * (no setns needed) with only the given capabilities (setpriv bounding set).
 */
export function startAgent(lab: CaptureLab, mode: 'tcx' | 'tc' | 'auto', inside?: { caps: string[] }): Promise<Agent> {
  const script = fileURLToPath(new URL('./capture-agent.ts', import.meta.url));
  const node = [process.execPath, '--import', 'tsx', script, UPLINK];
  const argv = inside
    ? [
        'ip',
        'netns',
        'exec',
        lab.node.name,
        'setpriv',
        `--bounding-set=-all${inside.caps.map((c) => `,+${c}`).join('')}`,
        '--inh-caps=-all',
        ...node,
        '-',
        mode,
      ]
    : [...node, lab.nodeNetns, mode];
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
  const lines = createInterface({ input: child.stdout! });
  const waiting: ((l: string) => void)[] = [];
  lines.on('line', (l) => waiting.shift()?.(l));
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const nextLine = () =>
    new Promise<string>((resolve, reject) => {
      waiting.push(resolve);
      child.once('exit', (code) => reject(new Error(`agent exited ${code}: ${stderr.trim()}`)));
    });
  const kill = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  };
  return nextLine().then(
    (l) => ({
      child,
      hello: JSON.parse(l) as AgentHello,
      read: async () => {
        const p = nextLine();
        child.stdin!.write('read\n');
        return JSON.parse(await p) as CounterReading;
      },
      kill,
    }),
    async (e) => {
      await kill();
      throw e;
    },
  );
}
