// A namespace lab that really loops: client and server pods on node1, node1 and node2 behind an "LB" namespace that
// DNATs VIP:80 to node1's NodePort without SNAT; node1 has TKE-style IPVS rules that leave the LB IP unbound.
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Netns, vethPair } from './netns.js';

export const LAB = {
  vip: '10.0.100.100',
  port: 80,
  nodePort: 30080,
  clusterIp: '10.96.0.80',
  podCidr: '10.244.1.0/24',
  clientPod: '10.244.1.10',
  serverPod: '10.244.1.20',
  serverPort: 8080,
  node1: '10.0.1.11',
  node2: '10.0.2.12',
  node1Name: 'node1',
} as const;

export type Etp = 'Local' | 'Cluster';

export type LoopLab = Awaited<ReturnType<typeof createLoopLab>>;

/** The chain that stands in for the IPVS virtual server of node1's NodePort (see node1Rules). */
const IPVS_STANDIN_CHAIN = 'CLBPROBE-LAB-IPVS-VS';

/** node1's nat table as kube-proxy's IPVS proxier writes it for lab/web, VIP unbound (TKE), with a DNAT for ip_vs. */
export function node1Rules(etp: Etp): string {
  const local = etp === 'Local';
  return [
    '*nat',
    ':PREROUTING ACCEPT [0:0]',
    ':INPUT ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':POSTROUTING ACCEPT [0:0]',
    `:${IPVS_STANDIN_CHAIN} - [0:0]`,
    ':KUBE-FIREWALL - [0:0]',
    ':KUBE-LOAD-BALANCER - [0:0]',
    ':KUBE-MARK-DROP - [0:0]',
    ':KUBE-MARK-MASQ - [0:0]',
    ':KUBE-NODE-PORT - [0:0]',
    ':KUBE-POSTROUTING - [0:0]',
    ':KUBE-SERVICES - [0:0]',
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    `-A PREROUTING -m comment --comment "stands in for IPVS: this kernel has no ip_vs" -j ${IPVS_STANDIN_CHAIN}`,
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    `-A ${IPVS_STANDIN_CHAIN} -d ${LAB.node1}/32 -p tcp -m tcp --dport ` +
      `${LAB.nodePort} -j DNAT --to-destination ${LAB.serverPod}:${LAB.serverPort}`,
    '-A KUBE-FIREWALL -j KUBE-MARK-DROP',
    ...(local
      ? [
          '-A KUBE-LOAD-BALANCER -m comment --comment "Kubernetes service load balancer ip + port with ' +
            'externalTrafficPolicy=local" -m set --match-set KUBE-LOAD-BALANCER-LOCAL dst,dst -j RETURN',
        ]
      : []),
    '-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ',
    '-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000',
    ...(local
      ? [
          '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port with ' +
            'externalTrafficPolicy=local" -m set --match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN',
        ]
      : []),
    '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for ' +
      'masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ',
    '-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip ' +
      'for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE',
    '-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN',
    '-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0',
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    '-A KUBE-SERVICES -m comment --comment "Kubernetes service lb portal" ' +
      '-m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER',
    '-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + ' +
      'port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ',
    '-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT',
    '-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT',
    '-A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j ACCEPT',
    'COMMIT',
    '',
  ].join('\n');
}

/** node1's ipsets (ipset save format): kube-proxy v1.20's IPVS-mode sets, filled for lab/web with `etp`. */
export function node1Ipsets(etp: Etp): string {
  const local = etp === 'Local';
  const lbPort = `${LAB.vip},tcp:${LAB.port}`;
  const sets: [name: string, type: string, members?: (string | false)[]][] = [
    ['KUBE-LOOP-BACK', 'hash:ip,port,ip', [`${LAB.serverPod},tcp:${LAB.serverPort},${LAB.serverPod}`]],
    ['KUBE-CLUSTER-IP', 'hash:ip,port', [`${LAB.clusterIp},tcp:${LAB.port}`]],
    ['KUBE-EXTERNAL-IP', 'hash:ip,port'],
    ['KUBE-EXTERNAL-IP-LOCAL', 'hash:ip,port'],
    ['KUBE-LOAD-BALANCER', 'hash:ip,port', [lbPort]],
    ['KUBE-LOAD-BALANCER-FW', 'hash:ip,port'],
    ['KUBE-LOAD-BALANCER-LOCAL', 'hash:ip,port', [local && lbPort]],
    ['KUBE-LOAD-BALANCER-SOURCE-IP', 'hash:ip,port,ip'],
    ['KUBE-LOAD-BALANCER-SOURCE-CIDR', 'hash:ip,port,net'],
    ['KUBE-NODE-PORT-TCP', 'bitmap:port', [`${LAB.nodePort}`]],
    ['KUBE-NODE-PORT-LOCAL-TCP', 'bitmap:port', [local && `${LAB.nodePort}`]],
    ['KUBE-NODE-PORT-UDP', 'bitmap:port'],
    ['KUBE-NODE-PORT-LOCAL-UDP', 'bitmap:port'],
    ['KUBE-NODE-PORT-SCTP-HASH', 'hash:ip,port'],
    ['KUBE-NODE-PORT-LOCAL-SCTP-HASH', 'hash:ip,port'],
  ];
  const lines = sets.flatMap(([name, type, members = []]) => [
    `create ${name} ${type} ${type === 'bitmap:port' ? 'range 0-65535' : 'family inet hashsize 1024 maxelem 65536'}`,
    ...members.filter((m) => m !== false).map((m) => `add ${name} ${m}`),
  ]);
  return `${lines.join('\n')}\n`;
}

/** The lab's Service, EndpointSlice and Node in the shape `kubectl get svc,endpointslices,nodes -A -o json` prints. */
export function clusterList(etp: Etp): object {
  return {
    apiVersion: 'v1',
    kind: 'List',
    metadata: { resourceVersion: '' },
    items: [
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: {
          name: 'web',
          namespace: 'lab',
          annotations: { 'service.kubernetes.io/qcloud-loadbalancer-internal-subnetid': 'subnet-lab00001' },
        },
        spec: {
          type: 'LoadBalancer',
          clusterIP: LAB.clusterIp,
          clusterIPs: [LAB.clusterIp],
          externalTrafficPolicy: etp,
          internalTrafficPolicy: 'Cluster',
          ...(etp === 'Local' ? { healthCheckNodePort: 32001 } : {}),
          ports: [
            { name: 'http', port: LAB.port, protocol: 'TCP', targetPort: LAB.serverPort, nodePort: LAB.nodePort },
          ],
          selector: { app: 'web' },
        },
        status: { loadBalancer: { ingress: [{ ip: LAB.vip, ipMode: 'VIP' }] } },
      },
      {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: {
          name: 'web-abcde',
          namespace: 'lab',
          // As the endpointslice controller labels the slices it derives from a selector.
          labels: {
            'kubernetes.io/service-name': 'web',
            'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io',
          },
        },
        addressType: 'IPv4',
        endpoints: [
          {
            addresses: [LAB.serverPod],
            conditions: { ready: true, serving: true, terminating: false },
            nodeName: LAB.node1Name,
            targetRef: { kind: 'Pod', namespace: 'lab', name: 'web-0' },
          },
        ],
        ports: [{ name: 'http', port: LAB.serverPort, protocol: 'TCP' }],
      },
      {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: LAB.node1Name },
        spec: { podCIDR: LAB.podCidr, podCIDRs: [LAB.podCidr] },
        status: {
          addresses: [
            { type: 'InternalIP', address: LAB.node1 },
            { type: 'Hostname', address: LAB.node1Name },
          ],
        },
      },
    ],
  };
}

/** A TCP server that greets each connection with `name`, run inside ns until the lab is destroyed. */
function serve(ns: Netns, port: number, name: string): ChildProcess {
  const js =
    `require('net').createServer((s)=>{s.end(${JSON.stringify(name)}` +
    `)}).listen(${port},'0.0.0.0',()=>console.log('up'))`;
  return spawn('ip', ['netns', 'exec', ns.name, process.execPath, '-e', js], { stdio: ['ignore', 'pipe', 'inherit'] });
}

function waitUp(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
}

/**
 * Builds the lab with namespaces named `prefix`PID-N; Service externalTrafficPolicy `etp`. node1's kube-proxy
 * rules are this file's hand-written ones, or none for a test running the real kube-proxy (test/support/kube-proxy.ts).
 */
export async function createLoopLab(etp: Etp, prefix: string, opts: { kubeProxy?: 'hand-written' | 'none' } = {}) {
  const handWritten = (opts.kubeProxy ?? 'hand-written') === 'hand-written';
  const created: Netns[] = [];
  const procs: ChildProcess[] = [];
  const destroy = (): void => {
    for (const p of procs) p.kill('SIGKILL');
    for (const ns of created) ns.delete();
  };
  try {
    const mk = (): Netns => {
      const ns = Netns.create(prefix);
      created.push(ns);
      return ns;
    };
    const [pod, server, node, node2, lb] = [mk(), mk(), mk(), mk(), mk()];
    // node1: pod bridge + uplink; rp_filter off so the looped packet (a local pod source from the uplink) is accepted.
    node.sh(`ip link add cni0 type bridge && ip link set cni0 up && ip addr add 10.244.1.1/24 dev cni0
             sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0`);
    for (const [ns, ip, name] of [
      [pod, LAB.clientPod, 'vethclient'],
      [server, LAB.serverPod, 'vethserver'],
    ] as const) {
      vethPair(ns, 'eth0', node, name);
      node.run('ip', 'link', 'set', name, 'master', 'cni0');
      ns.sh(`ip addr add ${ip}/24 dev eth0 && ip route add default via 10.244.1.1`);
    }
    vethPair(node, 'eth0', lb, 'n1');
    vethPair(node2, 'eth0', lb, 'n2');
    node.sh(
      `sysctl -qw net.ipv4.conf.eth0.rp_filter=0 && ip addr add ` +
        `${LAB.node1}/24 dev eth0 && ip route add default via 10.0.1.1`,
    );
    node2.sh(`ip addr add ${LAB.node2}/24 dev eth0 && ip route add default via 10.0.2.1`);
    // The LB: routes between its per-node links, DNATs VIP:80 to a backend's NodePort, never SNATs.
    const lbSetup = [
      'ip addr add 10.0.1.1/24 dev n1 && ip addr add 10.0.2.1/24 dev n2',
      `ip route add ${LAB.podCidr} via ${LAB.node1}`,
      'sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0',
      `iptables -t nat -A PREROUTING -s ${LAB.node1} -d ${LAB.vip} -p tcp --dport ${LAB.port} ` +
        `-j DNAT --to-destination ${LAB.node2}:${LAB.nodePort}`,
      `iptables -t nat -A PREROUTING -d ${LAB.vip} -p tcp --dport ${LAB.port} ` +
        `-j DNAT --to-destination ${LAB.node1}:${LAB.nodePort}`,
    ];
    lb.sh(lbSetup.join('\n           '));
    if (handWritten) loadKubeProxyState(node, etp);
    const servers = [serve(server, LAB.serverPort, 'server-pod'), serve(node2, LAB.nodePort, 'node2')];
    procs.push(...servers);
    await Promise.all(servers.map(waitUp));
    let current = etp;
    return {
      /** The Service's externalTrafficPolicy as node1's NAT rules currently implement it. */
      get etp(): Etp {
        return current;
      },
      pod,
      server,
      node,
      node2,
      lb,
      /** TCP connect from the client pod to VIP:80: 'connected' (with the server's greeting), 'timeout' or an errno. */
      connect: (timeoutMs: number): Promise<string> => connectFrom(pod, timeoutMs),
      /** Writes the cluster file (kubectl get ... -o json shape) for this lab's Service into dir; returns its path. */
      writeClusterFile(dir: string): string {
        const path = join(dir, `cluster-${current}.json`);
        writeFileSync(path, JSON.stringify(clusterList(current), null, 4));
        return path;
      },
      /** node1's kube-proxy rules and ipsets as kube-proxy writes them for `next`; looped conntrack entries flushed. */
      setEtp(next: Etp): void {
        if (!handWritten) throw new Error('setEtp: node1 runs the real kube-proxy; change the Service through the API');
        loadKubeProxyState(node, next);
        node.run('conntrack', '-F');
        current = next;
      },
      destroy,
    };
  } catch (e) {
    destroy();
    throw e;
  }
}

/** Replaces node1's nat table and KUBE-* ipsets with kube-proxy's for `etp` (restore -exist keeps the sets). */
function loadKubeProxyState(node: Netns, etp: Etp): void {
  node.sh(`for s in KUBE-LOAD-BALANCER-LOCAL KUBE-NODE-PORT-LOCAL-TCP; do ipset flush $s 2>/dev/null || true; done
ipset restore -exist <<'EOF'\n${node1Ipsets(etp)}EOF\niptables-restore <<'EOF'\n${node1Rules(etp)}EOF`);
}

function connectFrom(pod: Netns, timeoutMs: number): Promise<string> {
  const js = `const s=require('net').connect(${LAB.port},${JSON.stringify(LAB.vip)});let d='';
    const t=setTimeout(()=>{console.log('timeout');process.exit(0)},${timeoutMs});
    s.on('data',(b)=>d+=b);s.on('end',()=>{console.log('connected '+d);process.exit(0)});
    s.on('error',(e)=>{console.log(e.code);process.exit(0)});`;
  // Asynchronous, so that an agent running in this process keeps reading its events meanwhile.
  return new Promise((resolve) => {
    const p = spawn('ip', ['netns', 'exec', pod.name, process.execPath, '-e', js], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const kill = setTimeout(() => p.kill('SIGKILL'), timeoutMs + 5000);
    p.stdout.on('data', (b: Buffer) => (out += b));
    p.stderr.on('data', (b: Buffer) => (err += b));
    p.once('close', () => {
      clearTimeout(kill);
      resolve((out || err).trim());
    });
  });
}
