// Benchmark of the agent's gzip /metrics scrape alone, for two or more builds side by side in the
// same run (a change against its parent): each build's agent runs on its own node namespace with
// the same synthetic cluster and conntrack table (bench/agent's, smaller), and the builds are
// scraped in alternating rounds (A B, then B A, ...) so that the host's load falls on both alike.
//   npm run build && sudo node --import tsx bench/agent-scrape.ts --cli before=/path/dist/bundle/main.js --cli after=dist/bundle/main.js
// Other flags: --services 2000 --endpoints 8000 --entries 20000 --vip-entries 3000
//   --rounds 6 --scrapes 15 (per build per round) --cluster api|file (default api, as deployed)
//   --node-flags "..." (node options of the agents, default deploy/daemonset.yaml's; add e.g. --cpu-prof)
//   --node image|host|PATH (the agents' node binary, default image: the image's Node release)
// Per build: curl's median and p99 of all its scrapes, the median of its per-round medians as a
// ratio to the first --cli (the reference), and the agent's own CPU per scrape (/proc/PID/stat
// across the scrapes: what the scrape costs the agent, less sensitive to scheduling than curl's time).
// Root only. Namespaces are cbli-*; namespaces, agents, temp files and nf_conntrack_max are put
// back on exit, on failure and on Ctrl-C.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createWriteStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { createServer } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Netns, vethPair } from '../src/demo/netns.js';
import { agentContainer, containerEnv, hostArgv, nodeCommand } from '../test/support/daemonset.js';
import { FakeApiServer, type ResourceName } from '../test/support/fake-apiserver.js';
import { agentNode, nodeVersion } from '../test/support/image-node.js';
import { BENCH_NODE, syntheticCluster } from './agent-cluster.js';
import { type Destination, fill, raiseConntrackMax } from './conntrack-dump.js';

const argv = process.argv.slice(2);
const num = (name: string, def: number): number => {
  const i = argv.indexOf(name);
  const v = i >= 0 ? Number(argv[i + 1]) : def;
  if (!Number.isFinite(v) || v < 1) throw new Error(`${name}: expected a positive number, not ${argv[i + 1]}`);
  return v;
};
const builds = argv
  .flatMap((a, i) => (a === '--cli' ? [argv[i + 1]!] : []))
  .map((x) => {
    const eq = x.indexOf('=');
    if (eq < 1) throw new Error(`--cli LABEL=PATH, not ${x}`);
    return { label: x.slice(0, eq), cli: resolve(x.slice(eq + 1)) };
  });
if (builds.length < 2) throw new Error('give at least two builds: --cli before=PATH --cli after=PATH');
const opt = {
  services: num('--services', 2000),
  endpoints: num('--endpoints', 8000),
  entries: num('--entries', 20_000),
  vipEntries: num('--vip-entries', 3000),
  rounds: num('--rounds', 6),
  scrapes: num('--scrapes', 15),
  cluster: argv.includes('--cluster') ? argv[argv.indexOf('--cluster') + 1]! : 'api',
};
if (opt.cluster !== 'api' && opt.cluster !== 'file') throw new Error(`--cluster: api or file, not ${opt.cluster}`);

const deployed = agentContainer();
const deployedFlags = nodeCommand(hostArgv(deployed)).nodeFlags;
/** --node-flags "...": replaces deploy/daemonset.yaml's node flags, e.g. with "--cpu-prof --cpu-prof-dir=/tmp/p" added. */
const nodeFlags = argv.includes('--node-flags')
  ? argv[argv.indexOf('--node-flags') + 1]!.split(' ').filter(Boolean)
  : deployedFlags;
const deployedEnv = containerEnv(deployed, { 'spec.nodeName': 'bench' });
const NODE = agentNode(argv);
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

const undo: (() => void)[] = [];
let cleaned = false;
function cleanup(): void {
  if (cleaned) return;
  cleaned = true;
  for (const f of undo.reverse()) {
    try {
      f();
    } catch (e) {
      console.error(`clean-up: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
}
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    cleanup();
    process.exit(130);
  });
}
process.on('exit', cleanup);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (s: string) => console.error(`[scrape-bench ${new Date().toISOString().slice(11, 19)}] ${s}`);
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / CLK_TCK;
}

function freePort(): Promise<number> {
  return new Promise((r) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => r(port));
    });
  });
}

function status(url: string): Promise<number> {
  return new Promise((r) => {
    get(url, (res) => {
      res.resume();
      r(res.statusCode ?? 0);
    }).on('error', () => r(0));
  });
}

/** curl's times of n gzip scrapes (as Prometheus asks), and the agent's CPU seconds meanwhile. */
function scrape(url: string, pid: number, n: number): { times: number[]; cpuS: number } {
  const times: number[] = [];
  const c0 = cpuSeconds(pid);
  for (let i = 0; i < n; i++) {
    const r = spawnSync(
      'curl',
      ['-sf', '-H', 'Accept-Encoding: gzip', '-o', '/dev/null', '-w', '%{time_total}', `${url}/metrics`],
      { encoding: 'utf8' },
    );
    if (r.status !== 0) throw new Error(`curl ${url}/metrics failed: ${r.stderr}`);
    times.push(Number(r.stdout) * 1000);
  }
  return { times, cpuS: cpuSeconds(pid) - c0 };
}

interface Running {
  label: string;
  proc: ChildProcess;
  url: string;
  logFile: string;
}

async function clusterArgs(dir: string, list: { items: object[] }): Promise<string[]> {
  if (opt.cluster === 'file') {
    const file = join(dir, 'cluster.json');
    writeFileSync(file, JSON.stringify(list));
    return ['--cluster-file', file];
  }
  const api = new FakeApiServer();
  const resource: Record<string, ResourceName> = {
    Service: 'services',
    EndpointSlice: 'endpointslices',
    Ingress: 'ingresses',
    Node: 'nodes',
  };
  for (const item of list.items as { kind: string }[]) api.apply(resource[item.kind]!, item);
  await api.start();
  undo.push(() => void api.stop());
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, api.kubeconfig());
  return ['--kubeconfig', kubeconfig];
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'clbprobe-scrape-bench-'));
  undo.push(() => rmSync(dir, { recursive: true, force: true }));
  const cluster = syntheticCluster(opt.services, opt.endpoints, { managedFields: opt.cluster === 'api' });
  const cargs = await clusterArgs(dir, cluster.list);
  undo.push(raiseConntrackMax(opt.entries * builds.length + 50_000));
  const vips = cluster.tcpVipPorts;
  const toVip: Destination = (i) => {
    const v = vips[i % vips.length]!;
    return { dst: Buffer.from(v.vip.split('.').map(Number)), dport: v.port };
  };
  const unrelated = opt.entries - opt.vipEntries;
  const agents: Running[] = [];
  for (const b of builds) {
    const node = Netns.create('cbli-node');
    undo.push(() => node.delete());
    const peer = Netns.create('cbli-peer');
    undo.push(() => peer.delete());
    vethPair(node, 'eth0', peer, 'eth0');
    node.sh(`ip addr add ${BENCH_NODE.ip}/24 dev eth0 && ip route add default via ${BENCH_NODE.peerIp}`);
    peer.sh(`ip addr add ${BENCH_NODE.peerIp}/24 dev eth0`);
    fill(node.path, opt.entries, (i) => (i < unrelated ? { dst: Buffer.from([10, 200, 0, 1]), dport: 80 } : toVip(i)));
    const port = await freePort();
    const logFile = join(dir, `agent-${b.label}.log`);
    const out = createWriteStream(logFile);
    const args = [
      'agent',
      '--listen',
      `127.0.0.1:${port}`,
      '--evidence-socket',
      join(dir, `${b.label}.sock`),
      '--log-level',
      'info',
    ];
    args.push(
      '--netns',
      node.name,
      '--interface',
      'eth0',
      '--capture',
      'ebpf',
      '--node-name',
      BENCH_NODE.name,
      ...cargs,
    );
    const proc = spawn(NODE, [...nodeFlags, b.cli, ...args], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, ...deployedEnv },
    });
    proc.stderr!.pipe(out);
    undo.push(() => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    });
    agents.push({ label: b.label, proc, url: `http://127.0.0.1:${port}`, logFile });
  }
  for (const a of agents) {
    const end = Date.now() + 300_000;
    while ((await status(`${a.url}/readyz`)) !== 200) {
      if (Date.now() > end || a.proc.exitCode !== null)
        throw new Error(`${a.label} not ready: ${readFileSync(a.logFile, 'utf8').slice(-2000)}`);
      await sleep(200);
    }
  }
  // V8's memory reducer runs its full GCs in the first ~20 s after start-up: not a scrape's cost.
  log(`all ready; settling 25 s (load ${load()})`);
  await sleep(25_000);
  for (const a of agents) scrape(a.url, a.proc.pid!, 5);

  const all = new Map<string, { times: number[]; cpuS: number; medians: number[] }>(
    agents.map((a) => [a.label, { times: [], cpuS: 0, medians: [] }]),
  );
  const loadBefore = load();
  for (let r = 0; r < opt.rounds; r++) {
    const order = r % 2 === 0 ? agents : [...agents].reverse();
    const line: string[] = [];
    for (const a of order) {
      const s = scrape(a.url, a.proc.pid!, opt.scrapes);
      const x = all.get(a.label)!;
      x.times.push(...s.times);
      x.cpuS += s.cpuS;
      x.medians.push(pct(s.times, 50));
      line.push(
        `${a.label} ${pct(s.times, 50).toFixed(1)} ms (cpu ${((s.cpuS / opt.scrapes) * 1000).toFixed(1)} ms/scrape)`,
      );
    }
    log(`round ${r + 1}: ${line.join(', ')}; load ${load()}`);
  }
  const ref = all.get(agents[0]!.label)!;
  const commit = spawnSync('git', ['-C', import.meta.dirname, 'describe', '--always', '--dirty'], {
    encoding: 'utf8',
  }).stdout.trim();
  console.log(
    `\nagent gzip /metrics scrapes: ${opt.services} Services, ${opt.endpoints} endpoints, ${opt.entries} conntrack entries (${opt.vipEntries} towards VIPs), cluster ${opt.cluster}`,
  );
  console.log(
    `${opt.rounds} alternating rounds x ${opt.scrapes} scrapes per build; bench at ${commit}; node ${nodeVersion(NODE)} ${nodeFlags.join(' ')}; load (1/5/15 min) before ${loadBefore}, after ${load()}`,
  );
  console.log(
    '| build | median ms | p99 ms | median of round medians, ratio to ' +
      agents[0]!.label +
      ' | agent CPU ms per scrape | cli |',
  );
  console.log('|---|---|---|---|---|---|');
  for (const a of agents) {
    const x = all.get(a.label)!;
    const ratio = pct(
      x.medians.map((m, i) => m / ref.medians[i]!),
      50,
    );
    const cpu = (x.cpuS / x.times.length) * 1000;
    const b = builds.find((y) => y.label === a.label)!;
    console.log(
      `| ${a.label} | ${pct(x.times, 50).toFixed(1)} | ${pct(x.times, 99).toFixed(1)} | ${pct(x.medians, 50).toFixed(1)} (${ratio.toFixed(2)}x) | ${cpu.toFixed(1)} (${(cpu / ((ref.cpuS / ref.times.length) * 1000)).toFixed(2)}x) | ${b.cli} |`,
    );
  }
  for (const a of agents) {
    const exited = new Promise((r) => a.proc.once('exit', r));
    a.proc.kill('SIGTERM');
    await Promise.race([exited, sleep(6000)]);
  }
}

main()
  .catch((e: unknown) => {
    console.error(e instanceof Error ? (e.stack ?? e.message) : String(e));
    process.exitCode = 1;
  })
  // The fake API server would keep the process alive: clean up and leave.
  .finally(() => {
    cleanup();
    process.exit();
  });
