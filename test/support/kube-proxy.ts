// The real kube-proxy v1.20.2 (built by scripts/setup-kube.sh) in iptables mode inside a lab's
// node namespace, against the real API server of test/support/kube-control-plane.ts.
// NETWORK SAFETY: the API server listens on the root namespace's 127.0.0.1, which a namespace
// cannot reach; kube-proxy gets it through two relays and a Unix socket (test/support/relay.ts):
// 127.0.0.1:6443 inside the node namespace -> socket file -> the API server's port on the root
// loopback. Its kubeconfig names 127.0.0.1:6443, a loopback address in either namespace, so no
// process ever sends packets to an in-namespace address from the root namespace.
// kube-proxy writes machine-wide conntrack sysctls unless told not to: --conntrack-max-per-core=0
// and zero TCP timeouts leave them alone. Its health and metrics servers bind the namespace's
// loopback. It authenticates as system:kube-proxy (bound to system:node-proxier by the API
// server's bootstrap policy, as kubeadm's kube-proxy is).
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { binary, type ControlPlane } from './kube-control-plane.js';
import type { Netns } from './netns.js';
import { type Relay, relay } from './relay.js';
import { sleep } from './wait.js';

/** Where kube-proxy finds the API server inside the node namespace. */
const API_PORT_IN_NS = 6443;

export interface KubeProxyOptions {
  /** --hostname-override: the Node object kube-proxy takes locality from. */
  nodeName: string;
  /** --cluster-cidr: enables the local-traffic detector ("Redirect pods trying to reach external loadbalancer VIP"). */
  clusterCidr: string;
}

export interface KubeProxy {
  readonly node: Netns;
  readonly pid: number;
  /** iptables-save of the node namespace (all tables). */
  save(): string;
  /** Polls `save()` until `done` holds; throws with kube-proxy's log tail after `ms`. */
  waitForRules(what: string, done: (save: string) => boolean, ms?: number): Promise<string>;
  log(lines?: number): string;
  /** Stops kube-proxy and the relays (its rules stay in the namespace); idempotent. */
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of running) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

/** True when scripts/setup-kube.sh has built kube-proxy (and the control plane's binaries). */
export function kubeCacheReady(): boolean {
  try {
    for (const b of ['kube-proxy', 'kube-apiserver', 'etcd', 'kubectl']) binary(b);
    return true;
  } catch {
    return false;
  }
}

function kubeProxyArgs(kubeconfig: string, o: KubeProxyOptions): string[] {
  return [
    `--kubeconfig=${kubeconfig}`,
    `--hostname-override=${o.nodeName}`,
    '--proxy-mode=iptables',
    `--cluster-cidr=${o.clusterCidr}`,
    // Machine-wide settings kube-proxy would otherwise write (nf_conntrack_max, hashsize, timeouts).
    '--conntrack-max-per-core=0',
    '--conntrack-tcp-timeout-established=0',
    '--conntrack-tcp-timeout-close-wait=0',
    '--oom-score-adj=0',
    '--healthz-bind-address=127.0.0.1:10256',
    '--metrics-bind-address=127.0.0.1:10249',
    '--iptables-min-sync-period=0s',
    '--v=2',
  ];
}

export async function startKubeProxy(cp: ControlPlane, node: Netns, o: KubeProxyOptions): Promise<KubeProxy> {
  const bin = binary('kube-proxy');
  const dir = mkdtempSync(join(tmpdir(), 'cbkp-'));
  const socket = join(dir, 'api.sock');
  const logFile = join(dir, 'kube-proxy.log');
  const relays: Relay[] = [];
  let p: ChildProcess | undefined;
  let stopped = false;

  const log = (lines = 30): string => {
    try {
      return readFileSync(logFile, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  };
  const save = (): string => {
    const r = spawnSync('ip', ['netns', 'exec', node.name, 'iptables-save'], { encoding: 'utf8', timeout: 20_000 });
    if (r.status !== 0) throw new Error(`iptables-save in ${node.name}: ${r.stderr}`);
    return r.stdout;
  };
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    if (p && p.exitCode === null && p.signalCode === null) {
      const child = p;
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => child.kill('SIGKILL'), 5000);
        child.once('exit', () => {
          clearTimeout(t);
          resolve();
        });
        child.kill('SIGTERM');
      });
    }
    for (const r of relays) r.close();
    if (!process.env.CBK_KEEP) rmSync(dir, { recursive: true, force: true });
  };

  try {
    relays.push(await relay(undefined, { path: socket }, { port: cp.port }));
    relays.push(await relay(node.name, { port: API_PORT_IN_NS }, { path: socket }));
    const kubeconfig = cp.kubeconfig('kubeProxy', `https://127.0.0.1:${API_PORT_IN_NS}`);
    const fd = openSync(logFile, 'a');
    p = spawn('ip', ['netns', 'exec', node.name, bin, ...kubeProxyArgs(kubeconfig, o)], { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    const child = p;
    running.add(child);
    child.once('exit', () => running.delete(child));
    // Up once its health server answers in the namespace (it serves before the first sync).
    const end = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`kube-proxy exited ${child.exitCode}:\n${log()}`);
      const r = spawnSync(
        'ip',
        [
          'netns',
          'exec',
          node.name,
          'curl',
          '-s',
          '-o',
          '/dev/null',
          '-w',
          '%{http_code}',
          'http://127.0.0.1:10256/healthz',
        ],
        {
          encoding: 'utf8',
          timeout: 5000,
        },
      );
      if (/^[2-5]\d\d$/.test(r.stdout ?? '')) break;
      if (Date.now() > end) throw new Error(`kube-proxy health server not up after 60 s:\n${log()}`);
      await sleep(200);
    }
  } catch (e) {
    await stop();
    throw e;
  }

  return {
    node,
    pid: p.pid!,
    save,
    log,
    async waitForRules(what, done, ms = 30_000) {
      const end = Date.now() + ms;
      for (;;) {
        if (p!.exitCode !== null)
          throw new Error(`kube-proxy exited ${p!.exitCode} while waiting for ${what}:\n${log()}`);
        const s = save();
        if (done(s)) return s;
        if (Date.now() > end) throw new Error(`kube-proxy: no ${what} after ${ms} ms:\n${log()}`);
        await sleep(250);
      }
    },
    stop,
  };
}
