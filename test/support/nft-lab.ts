// An nftables-mode node in namespaces, for test/lab/nft.test.ts:
//   pod (10.244.1.2) and a local endpoint pod (10.244.1.3) on the node's bridge;
//   the node (192.168.50.2 on its uplink) with kube-proxy's nftables ruleset
//   (test/support/kube-nft.ts) loaded by the real nft;
//   "up", the rest of the network: a pod of another node (10.244.2.5:8080) and the
//   cloud LB, which answers on port 80 for every address of 203.0.113.0/24 not
//   taken by kube-proxy on the node (what a packet that leaves the node reaches).
// Every server greets with its name and the peer address it saw, so a test can
// tell where a connection ended and whether it was masqueraded.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { kubeProxyRuleset, type NftLayout, type NftService } from './kube-nft.js';
import { Netns, vethPair } from './netns.js';

export const NFT_LAB = {
  podCidr: '10.244.0.0/16',
  serviceCidr: '10.96.0.0/16',
  pod: '10.244.1.2',
  localEp: '10.244.1.3',
  remoteEp: '10.244.2.5',
  epPort: 8080,
  node: '192.168.50.2',
  up: '192.168.50.1',
  lbNet: '203.0.113.0/24',
} as const;

export interface NftLab {
  node: Netns;
  pod: Netns;
  /** Loads kube-proxy's ruleset for these Services (replacing the table) and forgets conntrack entries. */
  load(layout: NftLayout, services: NftService[]): string;
  /** TCP connect from ns to ip:port: 'local-ep <peer>', 'remote-ep <peer>', 'lb <peer>', 'timeout' or an errno. */
  connect(from: Netns, ip: string, port: number, timeoutMs?: number): Promise<string>;
  destroy(): void;
}

function serve(ns: Netns, port: number, name: string, host = '0.0.0.0'): ChildProcess {
  const js = `require('net').createServer((s)=>{s.end(${JSON.stringify(name)}+' '+s.remoteAddress)}).listen(${port},${JSON.stringify(host)},()=>console.log('up'))`;
  return spawn('ip', ['netns', 'exec', ns.name, process.execPath, '-e', js], { stdio: ['ignore', 'pipe', 'inherit'] });
}

function waitUp(p: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    p.stdout!.once('data', () => resolve());
    p.once('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
}

export async function createNftLab(prefix = 'cbn-'): Promise<NftLab> {
  const made: Netns[] = [];
  const procs: ChildProcess[] = [];
  const destroy = (): void => {
    for (const p of procs) p.kill('SIGKILL');
    for (const ns of made) ns.delete();
  };
  try {
    const mk = (): Netns => {
      const ns = Netns.create(prefix);
      made.push(ns);
      return ns;
    };
    const [node, pod, ep, up] = [mk(), mk(), mk(), mk()];
    const L = NFT_LAB;
    node.sh(`ip link add br0 type bridge && ip addr add 10.244.1.1/24 dev br0 && ip link set br0 up
sysctl -qw net.ipv4.ip_forward=1`);
    for (const [ns, ip] of [
      [pod, L.pod],
      [ep, L.localEp],
    ] as const) {
      const port = `v${made.indexOf(ns)}`;
      vethPair(ns, 'eth0', node, port);
      node.run('ip', 'link', 'set', port, 'master', 'br0');
      ns.sh(`ip addr add ${ip}/24 dev eth0 && ip route add default via 10.244.1.1`);
    }
    vethPair(node, 'up0', up, 'down0');
    node.sh(`ip addr add ${L.node}/24 dev up0 && ip route add default via ${L.up}`);
    up.sh(`ip addr add ${L.up}/24 dev down0 && ip addr add ${L.remoteEp}/32 dev lo
ip route add 10.244.1.0/24 via ${L.node} && ip route add local ${L.lbNet} dev lo`);
    procs.push(serve(ep, L.epPort, 'local-ep'), serve(up, L.epPort, 'remote-ep', L.remoteEp), serve(up, 80, 'lb'));
    await Promise.all(procs.map(waitUp));
    return {
      node,
      pod,
      load(layout, services) {
        const rs = kubeProxyRuleset({
          family: 'ip',
          layout,
          podCidr: L.podCidr,
          serviceCidr: L.serviceCidr,
          nodePortIPs: [L.node],
          services,
        });
        node.sh(`nft delete table ip kube-proxy 2>/dev/null || true; conntrack -F 2>/dev/null || true`);
        const r = spawnInput(node, ['nft', '-f', '-'], rs);
        if (r) throw new Error(`nft -f in ${node.name}: ${r}`);
        return rs;
      },
      connect: (from, ip, port, timeoutMs = 1500) => connectFrom(from, ip, port, timeoutMs),
      destroy,
    };
  } catch (e) {
    destroy();
    throw e;
  }
}

function spawnInput(ns: Netns, argv: string[], input: string): string | undefined {
  const r = spawnSync('ip', ['netns', 'exec', ns.name, ...argv], { input, encoding: 'utf8' });
  return r.status === 0 ? undefined : r.stderr.trim();
}

function connectFrom(ns: Netns, ip: string, port: number, timeoutMs: number): Promise<string> {
  const js = `const s=require('net').connect(${port},${JSON.stringify(ip)});let d='';
    const t=setTimeout(()=>{console.log('timeout');process.exit(0)},${timeoutMs});
    s.on('data',(b)=>d+=b);s.on('end',()=>{console.log(d);process.exit(0)});
    s.on('error',(e)=>{console.log(e.code);process.exit(0)});`;
  return new Promise((resolve) => {
    const p = spawn('ip', ['netns', 'exec', ns.name, process.execPath, '-e', js], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const kill = setTimeout(() => p.kill('SIGKILL'), timeoutMs + 5000);
    p.stdout.on('data', (b: Buffer) => (out += b));
    p.once('close', () => {
      clearTimeout(kill);
      resolve(out.trim());
    });
  });
}
