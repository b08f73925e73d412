// The namespace loop lab (src/demo/lab.ts) with the real kube-proxy v1.20.2 writing node1's rules
// instead of the hand-written ones: the real API server (test/support/kube-control-plane.ts), the
// lab's Node, Service and EndpointSlice created through the API (LB address through the status
// subresource), and kube-proxy in iptables mode in node1's namespace
// (test/support/kube-proxy.ts). Plus what the loops on real rules need: an L7 Ingress LB in the
// LB namespace (test/support/ingress-lb.py), `diagnose` in node1 with the API server's own
// `kubectl get -o json` as the cluster file, and a connect to any address from the client pod.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { clusterList, createLoopLab, type Etp, LAB, type LoopLab } from '../../src/demo/lab.js';
import type { Finding } from '../../src/detect/types.js';
import { type ControlPlane, startControlPlane } from './kube-control-plane.js';
import { createList } from './kube-objects.js';
import { type KubeProxy, startKubeProxy } from './kube-proxy.js';
import { runCli } from './run-cli.js';

const INGRESS_LB = join(import.meta.dirname, 'ingress-lb.py');
export const SERVICE_PATH = '/api/v1/namespaces/lab/services/web';

export interface KubeLab {
  lab: LoopLab;
  cp: ControlPlane;
  kubeProxy: KubeProxy;
  /** Merge-patches lab/web (spec or metadata) and waits until kube-proxy's rules satisfy `synced`. */
  patchService(patch: object, what: string, synced: (save: string) => boolean): Promise<string>;
  /** Sets lab/web's status.loadBalancer.ingress through the status subresource, then waits for `synced`. */
  setLbIngress(ingress: object[], what: string, synced: (save: string) => boolean): Promise<string>;
  /** `kubectl get services,endpointslices,ingresses,nodes[,extraKinds] -A -o json` from the API server, written to `path`. */
  writeClusterFile(path: string, extraKinds?: string[]): string;
  /**
   * The compiled `clbprobe diagnose --json` in node1's namespace. Blocks this process: a connect
   * started before it (its own child process) keeps going, which is how tests diagnose a loop while
   * its short-lived conntrack entries are still there.
   */
  diagnose(clusterFile: string, extraArgs?: string[]): Diagnosis;
  /** TCP connect from the client pod to ip:port: 'connected <greeting>' (what came back before the end), 'timeout' or an errno. */
  connect(ip: string, port: number, timeoutMs: number): Promise<string>;
  destroy(): Promise<void>;
}

export interface Diagnosis {
  status: number | null;
  findings: Finding[];
  stderr: string;
}

/** Builds the lab (namespaces `prefix`...), creates lab/web with `etp` and waits for kube-proxy's first sync of it. */
export async function createKubeLab(prefix: string, etp: Etp): Promise<KubeLab> {
  const cp = await startControlPlane();
  const lab = await createLoopLab(etp, prefix, { kubeProxy: 'none' });
  let kubeProxy: KubeProxy | undefined;
  try {
    await createList(cp, clusterList(etp) as { items: Record<string, unknown>[] });
    kubeProxy = await startKubeProxy(cp, lab.node, { nodeName: LAB.node1Name, clusterCidr: '10.244.0.0/16' });
    await kubeProxy.waitForRules(
      'lab/web:http loadbalancer IP',
      (s) => s.includes('"lab/web:http loadbalancer IP"') && s.includes('--dport 30080'),
    );
  } catch (e) {
    await kubeProxy?.stop();
    lab.destroy();
    await deleteLabObjects(cp);
    throw e;
  }
  const kp = kubeProxy;
  return {
    lab,
    cp,
    kubeProxy: kp,
    async patchService(patch, what, synced) {
      const r = await cp.request('PATCH', SERVICE_PATH, patch);
      if (r.status !== 200)
        throw new Error(`PATCH ${SERVICE_PATH}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
      return kp.waitForRules(what, synced);
    },
    async setLbIngress(ingress, what, synced) {
      const r = await cp.request('PATCH', `${SERVICE_PATH}/status`, { status: { loadBalancer: { ingress } } });
      if (r.status !== 200)
        throw new Error(`PATCH ${SERVICE_PATH}/status: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
      return kp.waitForRules(what, synced);
    },
    writeClusterFile(path, extraKinds = []) {
      writeFileSync(
        path,
        cp.kubectl([
          'get',
          ['services', 'endpointslices', 'ingresses', 'nodes', ...extraKinds].join(','),
          '-A',
          '-o',
          'json',
        ]),
      );
      return path;
    },
    diagnose(clusterFile, extraArgs = []) {
      const r = runCli(
        lab.node.name,
        ['diagnose', '--json', '--cluster-file', clusterFile, '--node-name', LAB.node1Name, ...extraArgs],
        90_000,
      );
      const out = r.stdout ? (JSON.parse(r.stdout) as { findings: Finding[] }) : { findings: [] };
      return { status: r.status, findings: out.findings, stderr: r.stderr };
    },
    connect: (ip, port, timeoutMs) => connectFrom(lab, ip, port, timeoutMs),
    async destroy() {
      await kp.stop();
      lab.destroy();
      await deleteLabObjects(cp);
    },
  };
}

/** Removes the lab's objects, so the next lab in the same control plane starts from none. */
async function deleteLabObjects(cp: ControlPlane): Promise<void> {
  await cp.request('DELETE', '/api/v1/namespaces/lab/services/web').catch(() => undefined);
  await cp
    .request('DELETE', '/apis/discovery.k8s.io/v1beta1/namespaces/lab/endpointslices/web-abcde')
    .catch(() => undefined);
  await cp.request('DELETE', '/apis/networking.k8s.io/v1/namespaces/lab/ingresses/web').catch(() => undefined);
  await cp.request('DELETE', `/api/v1/nodes/${LAB.node1Name}`).catch(() => undefined);
}

export interface IngressLb {
  vip: string;
  stop(): void;
}

/**
 * An L7 LB on `vip`:80 in the lab's LB namespace that proxies to node1's NodePort, keeping the
 * client's address (IP_TRANSPARENT) or not, giving up on a backend after `backendTimeoutS`; and the
 * Ingress lab/web whose status carries `vip`.
 */
export async function startIngressLb(
  k: KubeLab,
  vip: string,
  keepClientIp: boolean,
  backendTimeoutS = 3,
): Promise<IngressLb> {
  const lb = await startL7Lb(k, vip, keepClientIp, backendTimeoutS);
  try {
    await createIngress(k, vip);
  } catch (e) {
    lb.stop();
    throw e;
  }
  return lb;
}

/** The L7 LB process of startIngressLb alone: what describes it in the cluster is the caller's. */
export async function startL7Lb(
  k: KubeLab,
  vip: string,
  keepClientIp: boolean,
  backendTimeoutS = 3,
): Promise<IngressLb> {
  k.lab.lb.sh(`ip addr replace ${vip}/32 dev lo`);
  const args = [
    INGRESS_LB,
    vip,
    '80',
    LAB.node1,
    String(LAB.nodePort),
    '--backend-timeout',
    String(backendTimeoutS),
    ...(keepClientIp ? ['--keep-client-ip'] : []),
  ];
  const p = spawn('ip', ['netns', 'exec', k.lab.lb.name, '/usr/bin/python3', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  p.stderr!.on('data', (b: Buffer) => (err += b));
  await new Promise<void>((resolve, reject) => {
    p.stdout!.once('data', () => resolve());
    p.once('exit', (code) => reject(new Error(`ingress-lb.py exited ${code}: ${err}`)));
  });
  return {
    vip,
    stop() {
      p.kill('SIGKILL');
    },
  };
}

async function createIngress(k: KubeLab, vip: string): Promise<void> {
  const ingress = {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'Ingress',
    metadata: { name: 'web', namespace: 'lab' },
    spec: {
      rules: [
        {
          http: {
            paths: [
              { path: '/', pathType: 'Prefix', backend: { service: { name: 'web', port: { number: LAB.port } } } },
            ],
          },
        },
      ],
    },
  };
  const path = '/apis/networking.k8s.io/v1/namespaces/lab/ingresses';
  const existing = await k.cp.request('GET', `${path}/web`);
  if (existing.status === 404) await k.cp.create(path, ingress);
  const r = await k.cp.request('PATCH', `${path}/web/status`, { status: { loadBalancer: { ingress: [{ ip: vip }] } } });
  if (r.status !== 200) throw new Error(`Ingress status: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
}

function connectFrom(lab: LoopLab, ip: string, port: number, timeoutMs: number): Promise<string> {
  const js = `const s=require('net').connect(${port},${JSON.stringify(ip)});let d='';
    const t=setTimeout(()=>{console.log('timeout');process.exit(0)},${timeoutMs});
    s.on('data',(b)=>d+=b);s.on('end',()=>{console.log('connected '+d);process.exit(0)});
    s.on('error',(e)=>{console.log(e.code);process.exit(0)});`;
  return new Promise((resolve) => {
    const p = spawn('ip', ['netns', 'exec', lab.pod.name, process.execPath, '-e', js], {
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
