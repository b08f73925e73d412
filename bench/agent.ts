// Benchmark of `clbprobe agent` at scale (issue 5), all figures in one run:
//   npm run build && sudo npm run bench:agent -- [--entries 1000000] [--services 5000] [--endpoints 20000]
//   (= sudo node --import tsx bench/agent.ts ...; the agent itself runs the DaemonSet's command: dist/bundle/main.js)
// Other flags: --vip-entries 3000 (of the entries, towards LB VIPs: the agent keeps these)
//   --active-vips 100 (the LB VIP:ports those entries and the events go to: the Service ports with series)
//   --event-rate 10000 (conntrack events/s) --window 20 (seconds per CPU window) --scrapes 20 --loops 5 (0: no loop lab)
//   --node-flags "..." (node options for the agents, default deploy/daemonset.yaml's NODE_OPTIONS; add e.g. --cpu-prof)
//   --cli PATH (another build of the agent's script, e.g. ../before/dist/bundle/main.js, to compare a change)
//   --netns-prefix P (namespace name prefix, default cbk-: runs beside one another use their own)
//   --keep-logs DIR (copy the agents' logs there at the end, e.g. to line their timestamps up with a sampler's)
//   --agent-args "..." (more arguments for the measured agent, e.g. --no-release-startup-pages)
//   --rss-trace FILE (the measured agent's VmRSS, RssAnon, RssFile and VmHWM every 10 ms from its start until the
//   end, a line each with the time, to line up with --keep-logs)
//   --start-only S (stop S seconds after /readyz with the memory figures: what start-up and the first sync peak at)
//   --node image|host|PATH (default image: the image's Node release, test/support/image-node.ts;
//   host: this host's node) for the agents and the bare-node reference
//   --cluster api|file (default api: Services, EndpointSlices, Nodes through list/watch from the
//   tests' fake API server, as deployed; file: the same objects in a --cluster-file)
//   --node-mode none|iptables|ipvs (default none: no kube-proxy rules on the node): kube-proxy's
//   rules for the synthetic cluster in the node namespace, loaded with iptables-restore (and
//   `ipset restore`): iptables mode as bench/kube-proxy-rules.ts writes them (5,000 Services x 4
//   endpoints: 147k rule lines), IPVS mode as bench/kube-proxy-ipvs-rules.ts does (the fixed
//   nat rules and the ipsets, KUBE-LOAD-BALANCER with one member per LB VIP:port). The IPVS
//   table itself and kube-ipvs0 cannot exist on a kernel without ip_vs and dummy links: the
//   IPVS-mode figures cover the agent reading those rules and sets, not an IPVS table.
// 1. A small loop lab (src/demo/lab.ts) with the agent on node1: time from a looping
//    connect to the loop_return counter in /metrics.
// 2. A node namespace with an uplink veth, N conntrack entries inserted over ctnetlink,
//    and a synthetic cluster (bench/agent-cluster.ts); the agent reads it with
//    --netns and eBPF counters on the uplink. Measured: time to /readyz, RSS, CPU idle,
//    CPU under paced conntrack events (and whether any was lost), /metrics render time,
//    one periodic resync. Reference figures from the same run (conntrack -C / -L on the
//    same table, a bare node process) make the numbers comparable across machines.
// Root only. Namespaces are cbk-* (or --netns-prefix); everything (namespaces, processes, temp files,
// nf_conntrack_max) is put back on exit, on failure and on Ctrl-C.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { get } from 'node:http';
import { createServer } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { createLoopLab, LAB } from '../src/demo/lab.js';
import { Netns, vethPair } from '../src/demo/netns.js';
import { agentContainer, containerEnv, hostArgv, nodeCommand } from '../test/support/daemonset.js';
import { FakeApiServer, type ResourceName } from '../test/support/fake-apiserver.js';
import { agentNode, nodeVersion } from '../test/support/image-node.js';
import { BENCH_NODE, syntheticCluster } from './agent-cluster.js';
import { paceEvents } from './agent-events.js';
import { type Destination, fill, raiseConntrackMax } from './conntrack-dump.js';
import { kubeProxyIpvsRules } from './kube-proxy-ipvs-rules.js';
import { kubeProxyRules } from './kube-proxy-rules.js';

const argv = process.argv.slice(2);
/** The value after flag `name`; undefined without the flag. */
const text = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
/** --cli PATH: another build of the agent (to compare a change); default the script deploy/daemonset.yaml runs, in this checkout. */
const CLI = text('--cli') ?? nodeCommand(hostArgv(agentContainer())).script;
const PREFIX = text('--netns-prefix') ?? 'cbk-';
/** The conntrack re-dump interval given to the agent, so that one happens during the run (default 10 min), after the event windows. */
const CONNTRACK_RESYNC_S = 110;
/** Seconds of start-up settling between the first-sync RSS and the idle window. */
const SETTLE_S = 15;
/**
 * Issue 20's targets for the agent at 1M entries / 5,000 Services / 20k endpoints, printed with
 * each figure: RSS after scrapes and events, peak RSS, CPU at 10k events/s with 10 % towards
 * VIPs, and the gzip /metrics p99 on a quiet box (the loaded-box figure is reported beside it).
 */
const TARGET = { rssMB: 80, peakMB: 85, eventCpuPct: 5, scrapeMs: 50, idleCpuPct: 1 } as const;
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

const arg = (name: string, def: number): number => {
  const i = argv.indexOf(name);
  const v = i >= 0 ? Number(argv[i + 1]) : def;
  if (!Number.isFinite(v) || v < 0) throw new Error(`${name}: expected a number, not ${argv[i + 1]}`);
  return v;
};
const opt = {
  entries: arg('--entries', 1_000_000),
  services: arg('--services', 5000),
  endpoints: arg('--endpoints', 20_000),
  vipEntries: arg('--vip-entries', 3000),
  activeVips: arg('--active-vips', 100),
  eventRate: arg('--event-rate', 10_000),
  window: arg('--window', 20),
  scrapes: arg('--scrapes', 20),
  loops: arg('--loops', 5),
  cluster: text('--cluster') ?? 'api',
  nodeMode: text('--node-mode') ?? 'none',
};
if (opt.cluster !== 'api' && opt.cluster !== 'file') throw new Error(`--cluster: api or file, not ${opt.cluster}`);
if (!['none', 'iptables', 'ipvs'].includes(opt.nodeMode))
  throw new Error(`--node-mode: none, iptables or ipvs, not ${opt.nodeMode}`);
/**
 * The agent runs as deployed: with deploy/daemonset.yaml's node flags (its command) and env (memory
 * depends on both). --node-flags "..." replaces the node flags, e.g. to add "--cpu-prof --cpu-prof-dir=/tmp/p".
 */
const deployed = agentContainer();
const deployedFlags = nodeCommand(hostArgv(deployed)).nodeFlags;
const words = (name: string): string[] | undefined => text(name)?.split(' ').filter(Boolean);
const nodeFlags = words('--node-flags') ?? deployedFlags;
const deployedEnv = containerEnv(deployed, { 'spec.nodeName': 'bench' });
const keepLogs = text('--keep-logs');
const agentArgs = words('--agent-args') ?? [];
const rssTrace = text('--rss-trace');
const startOnlyS = argv.includes('--start-only') ? arg('--start-only', 0) : undefined;
/** The node binary the agents and the bare-node reference run on (--node). */
const NODE = agentNode(argv);
const NODE_VERSION = nodeVersion(NODE);
const mallocArenaMax = deployedEnv.MALLOC_ARENA_MAX ?? '';

// ---- clean-up: run in reverse order, once, whatever happens ----
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
    console.error(`\n${sig}: cleaning up`);
    cleanup();
    process.exit(130);
  });
}
process.on('exit', cleanup);

// ---- small helpers ----
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (s: string) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${s}`);

/**
 * GET, asking for gzip as Prometheus does. The benchmark's own reads of /metrics (sources up, flow
 * counts before and after the event windows) must not be plain scrapes: each of those makes the
 * agent build the whole 5.8 MB text, garbage that Prometheus never causes and that landed in the
 * memory and event-CPU figures.
 */
function httpGet(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    // A connection of its own: a kept-alive one can be closed by the agent's 5 s idle timeout just as it is reused.
    get(url, { agent: false, headers: { 'accept-encoding': 'gzip' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const raw = Buffer.concat(chunks);
        try {
          const body = res.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw;
          resolve({ status: res.statusCode ?? 0, body: body.toString() });
        } catch (e) {
          reject(e as Error);
        }
      });
    }).on('error', reject);
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** VmRSS, VmHWM, and VmRSS split into anonymous memory and mapped files (the node binary), MB. */
function memory(pid: number): { rss: number; hwm: number; anon: number; file: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024, anon: kb('RssAnon') / 1024, file: kb('RssFile') / 1024 };
}

/** utime and stime of a process, seconds. */
function cpuTimes(pid: number): { user: number; sys: number } {
  // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: Number(f[11]) / CLK_TCK, sys: Number(f[12]) / CLK_TCK };
}

const cpuSeconds = (pid: number): number => {
  const t = cpuTimes(pid);
  return t.user + t.sys;
};

/** Paced events for `seconds`; the agent's CPU meanwhile, in % of a core (user, system). */
async function eventLoad(pid: number, netns: string, seconds: number, vipEvery: number, toVip: Destination) {
  const a = cpuTimes(pid);
  const run = await paceEvents(netns, opt.eventRate, seconds, vipEvery, toVip);
  const b = cpuTimes(pid);
  const pctOf = (x: number) => (x / run.seconds) * 100;
  return { run, cpu: pctOf(b.user + b.sys - a.user - a.sys), user: pctOf(b.user - a.user), sys: pctOf(b.sys - a.sys) };
}

/** Sum of a metric's samples whose label text contains every `labels` fragment. */
function metricSum(text: string, name: string, ...labels: string[]): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (labels.every((l) => line.includes(l))) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

async function until<T>(what: string, ms: number, f: () => Promise<T | undefined>, everyMs = 50): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

function timed(cmd: string[]): { ms: number; out: string } {
  const t0 = performance.now();
  const r = spawnSync(cmd[0]!, cmd.slice(1), { encoding: 'utf8', maxBuffer: 1 << 30 });
  if (r.status !== 0) throw new Error(`${cmd.join(' ')} exited ${r.status}: ${r.stderr}`);
  return { ms: performance.now() - t0, out: r.stdout };
}

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

/** Agent logs, shown when the benchmark fails (the temp dir is removed afterwards). */
const agentLogs: string[] = [];

interface Agent {
  proc: ChildProcess;
  pid: number;
  url: string;
  logFile: string;
}

/** Starts the compiled agent on netns; its log goes to a file in dir. */
async function startAgent(dir: string, tag: string, args: string[]): Promise<Agent> {
  const port = await freePort();
  const logFile = join(dir, `agent-${tag}.log`);
  agentLogs.push(logFile);
  const out = createWriteStream(logFile);
  const proc = spawn(
    NODE,
    [
      ...nodeFlags,
      CLI,
      'agent',
      '--listen',
      `127.0.0.1:${port}`,
      '--evidence-socket',
      join(dir, `${tag}.sock`),
      '--log-level',
      'info',
      ...args,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...deployedEnv } },
  );
  // stdout too: V8's traces (--node-flags "--trace-gc") are written there.
  proc.stdout!.pipe(out);
  proc.stderr!.pipe(out);
  undo.push(() => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  });
  return { proc, pid: proc.pid!, url: `http://127.0.0.1:${port}`, logFile };
}

/** Writes `pid`'s memory every 10 ms to `file` ("ISO time, ms since start, VmRSS RssAnon RssFile VmHWM MB") until it exits. */
function traceRss(pid: number, file: string): void {
  const out = createWriteStream(file);
  out.write('time ms rss anon file hwm\n');
  const t0 = performance.now();
  const timer = setInterval(() => {
    let m: ReturnType<typeof memory>;
    try {
      m = memory(pid);
    } catch {
      clearInterval(timer);
      out.end();
      return;
    }
    const mb = [m.rss, m.anon, m.file, m.hwm].map((x) => x.toFixed(1)).join(' ');
    out.write(`${new Date().toISOString()} ${(performance.now() - t0).toFixed(0)} ${mb}\n`);
  }, 10);
  undo.push(() => {
    clearInterval(timer);
    out.end();
  });
}

/** How many other processes run the agent's node binary: the kernel does not page out the pages they map too. */
function nodeSharers(agentPid: number): number {
  const bin = realpathSync(NODE);
  let n = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === agentPid) continue;
    try {
      if (readlinkSync(`/proc/${pid}/exe`) === bin) n++;
    } catch {
      // gone, or a kernel thread
    }
  }
  return n;
}

/** The most processes sharing the agent's node binary at once, checked every 250 ms until the returned stop(). */
function watchNodeSharers(agentPid: number): () => number {
  let most = 0;
  const timer = setInterval(() => {
    most = Math.max(most, nodeSharers(agentPid));
  }, 250);
  return () => {
    clearInterval(timer);
    return most;
  };
}

async function stopAgent(a: Agent): Promise<void> {
  if (a.proc.exitCode !== null || a.proc.signalCode !== null) return;
  const exited = new Promise((r) => a.proc.once('exit', r));
  a.proc.kill('SIGTERM');
  await Promise.race([exited, sleep(6000)]);
}

/**
 * The agent's `start-up pages released` log lines, each phase's RssFile before and after: what
 * keeps the start-up page release (src/agent/startup-pages.ts) in the agent.
 */
function startupReleases(agentLog: string): string {
  const phases: string[] = [];
  for (const line of agentLog.split('\n')) {
    if (!line.includes('"start-up pages released"')) continue;
    const e = JSON.parse(line) as { phase: string; rssFileMBBefore?: number; rssFileMBAfter?: number };
    phases.push(`${e.phase} ${e.rssFileMBBefore} -> ${e.rssFileMBAfter}`);
  }
  return phases.length > 0 ? `${phases.join(', ')} MB` : 'none (--no-release-startup-pages, or refused)';
}

interface Row {
  figure: string;
  value: string;
  target?: string;
  pass?: boolean;
}
const rows: Row[] = [];
const ref: Row[] = [];

// ---- 1. looping connect -> counter ----
async function loopLatency(dir: string): Promise<void> {
  log('loop lab: building');
  const lab = await createLoopLab('Local', PREFIX);
  undo.push(() => lab.destroy());
  const agent = await startAgent(dir, 'loop', [
    '--netns',
    lab.node.name,
    '--interface',
    'eth0',
    '--capture',
    'ebpf',
    '--node-name',
    LAB.node1Name,
    '--cluster-file',
    lab.writeClusterFile(dir),
  ]);
  await until('loop agent /readyz', 30_000, async () =>
    (await httpGet(`${agent.url}/readyz`)).status === 200 ? true : undefined,
  );
  const loopReturn = async () =>
    metricSum((await httpGet(`${agent.url}/metrics`)).body, 'clbprobe_lb_path_packets_total', 'kind="loop_return"');
  const samples: number[] = [];
  for (let n = 0; n < opt.loops; n++) {
    const before = await loopReturn();
    const t0 = performance.now();
    // bash's /dev/tcp starts in a few ms; the connect loops and times out (no greeting ever comes).
    const client = spawn(
      'ip',
      ['netns', 'exec', lab.pod.name, 'timeout', '1.5', 'bash', '-c', `exec 3<>/dev/tcp/${LAB.vip}/${LAB.port}`],
      {
        stdio: 'ignore',
      },
    );
    await until('loop_return to grow', 5000, async () => ((await loopReturn()) > before ? true : undefined), 10);
    samples.push(performance.now() - t0);
    await new Promise((r) => client.once('exit', r));
  }
  await stopAgent(agent);
  lab.destroy();
  const med = pct(samples, 50);
  log(`loop -> counter: ${samples.map((s) => s.toFixed(0)).join(', ')} ms`);
  rows.push({
    figure: `looping connect -> loop_return in /metrics (median of ${opt.loops}; max ${pct(samples, 100).toFixed(0)} ms)`,
    value: `${med.toFixed(0)} ms`,
    target: '< 1000 ms',
    pass: pct(samples, 100) < 1000,
  });
}

// ---- 2. the big node ----
async function bigNode(dir: string): Promise<void> {
  const node = Netns.create(`${PREFIX}node`);
  undo.push(() => node.delete());
  const peer = Netns.create(`${PREFIX}peer`);
  undo.push(() => peer.delete());
  vethPair(node, 'eth0', peer, 'eth0');
  node.sh(`ip addr add ${BENCH_NODE.ip}/24 dev eth0 && ip route add default via ${BENCH_NODE.peerIp}`);
  peer.sh(`ip addr add ${BENCH_NODE.peerIp}/24 dev eth0`);

  // The API server sends managedFields; kubectl get -o json (what a --cluster-file holds) hides them.
  const cluster = syntheticCluster(opt.services, opt.endpoints, { managedFields: opt.cluster === 'api' });
  const clusterArgs = await clusterSource(dir, cluster.list);
  log(
    `cluster (${opt.cluster === 'file' ? '--cluster-file' : 'Kubernetes API (fake API server, list/watch)'}): ${opt.services} Services (${cluster.servicePorts} ports), ${opt.endpoints} endpoints`,
  );

  if (opt.nodeMode !== 'none') loadKubeProxyRules(node, dir, cluster.list.items);

  undo.push(raiseConntrackMax(opt.entries + 200_000));
  // The node's pods call a bounded set of LB Services: the VIP entries and events go to the first --active-vips.
  const vips = cluster.tcpVipPorts.slice(0, opt.activeVips);
  const toVip: Destination = (i) => {
    const v = vips[i % vips.length]!;
    return { dst: Buffer.from(v.vip.split('.').map(Number)), dport: v.port };
  };
  let t0 = performance.now();
  // One fill: entry numbers must differ across the table, or reply tuples (pod -> client) would clash.
  const unrelated = opt.entries - opt.vipEntries;
  fill(node.path, opt.entries, (i) => (i < unrelated ? { dst: Buffer.from([10, 200, 0, 1]), dport: 80 } : toVip(i)));
  const count = Number(node.run('conntrack', '-C').trim());
  log(`filled ${count} conntrack entries in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  if (count !== opt.entries) throw new Error(`the table has ${count} entries, wanted ${opt.entries}`);
  const c = timed(['ip', 'netns', 'exec', node.name, 'conntrack', '-C']);
  const l = timed(['ip', 'netns', 'exec', node.name, 'sh', '-c', 'conntrack -L 2>/dev/null | wc -l']);
  ref.push({ figure: `conntrack -C (${count} entries)`, value: `${c.ms.toFixed(0)} ms` });
  ref.push({ figure: `conntrack -L | wc -l (${l.out.trim()} lines)`, value: `${l.ms.toFixed(0)} ms` });

  t0 = performance.now();
  const agent = await startAgent(dir, 'node', [
    '--netns',
    node.name,
    '--interface',
    'eth0',
    '--capture',
    'ebpf',
    '--node-name',
    BENCH_NODE.name,
    ...clusterArgs,
    '--conntrack-resync-interval',
    `${CONNTRACK_RESYNC_S}s`,
    ...agentArgs,
  ]);
  if (rssTrace) traceRss(agent.pid, rssTrace);
  const stopSharerWatch = watchNodeSharers(agent.pid);
  await until(`/readyz (agent log: ${agent.logFile})`, 300_000, async () =>
    (await httpGet(`${agent.url}/readyz`)).status === 200 ? true : undefined,
  );
  const readyAt = performance.now();
  const readyMs = readyAt - t0;
  // The log line comes through a pipe and may trail the HTTP answer a little.
  const kept = await until(
    '"first sync done" in the agent log',
    5000,
    async () => /"kept":(\d+)[^\n]*first sync done/.exec(readFileSync(agent.logFile, 'utf8'))?.[1],
  );
  log(`ready after ${(readyMs / 1000).toFixed(1)} s, kept ${kept} entries`);
  rows.push({
    figure: `time to /readyz 200 (process start, first sync of ${count} entries)`,
    value: `${(readyMs / 1000).toFixed(2)} s`,
  });
  if (Number(kept) !== opt.vipEntries) {
    // The agent waits 10 s for the first list, then starts without Services; when the view comes,
    // it reads the table again for the new VIPs (at 20,000 Services the list takes longer).
    const keptLater = await until(
      `the cluster view and ${opt.vipEntries} kept entries (agent log: ${agent.logFile})`,
      300_000,
      async () => {
        const t = (await httpGet(`${agent.url}/metrics`)).body;
        const k = metricSum(t, 'clbprobe_conntrack_entries_kept');
        return metricSum(t, 'clbprobe_source_up', 'source="cluster"') === 1 && k === opt.vipEntries ? k : undefined;
      },
    );
    const syncedMs = performance.now() - t0;
    log(
      `first sync without the cluster view (kept ${kept}); the view and ${keptLater} kept entries after ${(syncedMs / 1000).toFixed(1)} s`,
    );
    rows.push({
      figure: 'the cluster view (first list longer than the 10 s wait) and every VIP entry kept, from process start',
      value: `${(syncedMs / 1000).toFixed(2)} s`,
    });
  }

  const metrics = async () => (await httpGet(`${agent.url}/metrics`)).body;
  let text = await metrics();
  // The ipsets are a part of the nat source (no series of their own).
  const kubeProxySources = opt.nodeMode === 'none' ? [] : ['nat'];
  for (const source of ['conntrack', 'capture', 'cluster', 'addresses', ...kubeProxySources]) {
    if (metricSum(text, 'clbprobe_source_up', `source="${source}"`) !== 1) {
      throw new Error(
        `source ${source} is not up: ${text
          .split('\n')
          .filter((x) => x.startsWith('clbprobe_source_up'))
          .join(', ')}`,
      );
    }
  }
  await sleep(5000);
  const settled = memory(agent.pid);
  rows.push({
    figure: `other processes running ${NODE_VERSION}'s node binary during start-up, most at once (pages they map stay)`,
    value: String(stopSharerWatch()),
  });
  if (startOnlyS !== undefined) {
    await sleep(Math.max(0, startOnlyS * 1000 - (performance.now() - readyAt)));
    startOnlyRows(memory(agent.pid), readFileSync(agent.logFile, 'utf8'));
    await stopAgent(agent);
    return;
  }

  // Start-up settling: in the first ~20 s after ready V8 runs its memory reducer (full GCs that
  // give the start-up garbage back). Reported, no target: it happens once, not in steady state.
  const settle0 = cpuSeconds(agent.pid);
  await sleep(SETTLE_S * 1000);
  const settling = ((cpuSeconds(agent.pid) - settle0) / SETTLE_S) * 100;
  rows.push({
    figure: `CPU 5-${5 + SETTLE_S} s after ready (start-up settling: V8's memory reducer)`,
    value: `${settling.toFixed(2)} % of a core`,
  });

  // CPU idle: no events, no scrapes.
  const cpu0 = cpuSeconds(agent.pid);
  await sleep(opt.window * 1000);
  const idle = ((cpuSeconds(agent.pid) - cpu0) / opt.window) * 100;
  rows.push({
    figure: `CPU idle (${opt.window} s from ${5 + SETTLE_S} s after ready, no events, no scrapes)`,
    value: `${idle.toFixed(2)} % of a core`,
    target: `< ${TARGET.idleCpuPct} %`,
    pass: idle < TARGET.idleCpuPct,
  });

  // The periodic re-read of NAT/IPVS/addresses (every 60 s, the default), measured from just
  // before it is due until the process is quiet again, with nothing else going on.
  const beforeLight = await metrics();
  const c0 = metricSum(beforeLight, 'clbprobe_resyncs_total', 'source="nat"');
  const light = await burst(agent.pid, readyAt + Math.ceil((performance.now() - readyAt + 3000) / 60_000) * 60_000);

  // /metrics render time, as a C client sees it (curl's own timer: a Node client reading 5 MB
  // here would add its own time, and Prometheus is not Node), asked as Prometheus asks: gzip, the
  // body left compressed. Plain scrapes are timed at the end, after the memory figures: each
  // inflates the whole text (5.5 MB of garbage), which Prometheus never causes.
  const gz = scrapeTimes(agent.url, true, opt.scrapes);
  log(`gzip scrapes, in order: ${gz.times.map((t) => t.toFixed(0)).join(' ')} ms`);
  text = await metrics();
  const series = text.split('\n').filter((x) => x && !x.startsWith('#')).length;
  rows.push(...scrapeRows('gzip, as Prometheus asks', gz, series));
  const gzLoaded = loadedScrapeTimes(agent.url, opt.scrapes);
  log(
    `gzip scrapes with a busy loop on the other core, in order: ${gzLoaded.times.map((t) => t.toFixed(0)).join(' ')} ms`,
  );
  rows.push(...scrapeRows('gzip, the box loaded: a busy loop in another process', gzLoaded, series, false));

  // CPU under paced conntrack events; every 10th entry towards a VIP, counted by the agent on DESTROY.
  const flows = (t: string) => metricSum(t, 'clbprobe_conntrack_flows_total');
  const resyncs = (t: string) => metricSum(t, 'clbprobe_resyncs_total', 'source="conntrack"');
  const errors = (t: string) => metricSum(t, 'clbprobe_errors_total');
  const before = await metrics();
  const ev = await eventLoad(agent.pid, node.path, opt.window, 10, toVip);
  const run = ev.run;
  await sleep(1000);
  const after = await metrics();
  rows.push({
    figure: `CPU at ${(run.events / run.seconds).toFixed(0)} conntrack events/s, 10 % of them towards VIPs (${run.seconds.toFixed(0)} s)`,
    value: `${ev.cpu.toFixed(2)} % of a core (user ${ev.user.toFixed(1)}, sys ${ev.sys.toFixed(1)})`,
    target: `<= ${TARGET.eventCpuPct} %`,
    pass: ev.cpu <= TARGET.eventCpuPct,
  });
  const counted = flows(after) - flows(before);
  const lost = resyncs(after) - resyncs(before);
  const errs = errors(after) - errors(before);
  // Entries the kernel refused never existed: no event, nothing for the agent to count. A refusal
  // makes the run invalid (the table was full: nf_conntrack_max is machine-wide, and another
  // process can lower it below this namespace's 1M entries while the bench runs).
  const created = run.vipEntries - run.vipRefused;
  rows.push({
    figure: `events seen: VIP flows counted / VIP entries created+deleted; resyncs, errors during the run`,
    value: `${counted} / ${created}; ${lost}, ${errs}`,
    target: 'all; 0, 0',
    pass: counted === created && lost === 0 && errs === 0,
  });
  if (run.refused > 0 || run.answersLost) {
    const why = `the kernel refused ${run.refused} entries of the event window (${run.vipRefused} towards VIPs; first: ${run.firstRefusal ?? 'not read: answers lost'}); nf_conntrack_max is now ${conntrackMax()}, the node namespace holds ${conntrackCount(node)}`;
    log(`INVALID RUN: ${why}`);
    rows.push({
      figure: 'event window: entries refused by the kernel (table full: nf_conntrack_max lowered by another process?)',
      value: why,
      target: '0',
      pass: false,
    });
  }
  const steady = memory(agent.pid);
  rows.push({ figure: 'RSS after first sync (VmRSS)', value: `${settled.rss.toFixed(1)} MB` });
  rows.push({
    figure: 'RSS after scrapes and events (VmRSS)',
    value: `${steady.rss.toFixed(1)} MB`,
    target: `< ${TARGET.rssMB} MB`,
    pass: steady.rss < TARGET.rssMB,
  });
  rows.push({
    figure: 'peak RSS so far (VmHWM)',
    value: `${steady.hwm.toFixed(1)} MB`,
    target: `< ${TARGET.peakMB} MB`,
    pass: steady.hwm < TARGET.peakMB,
  });
  rows.push({
    figure: 'of the RSS after scrapes and events: anonymous (RssAnon) / mapped files, mostly the node binary (RssFile)',
    value: `${steady.anon.toFixed(1)} / ${steady.file.toFixed(1)} MB`,
  });
  rows.push({
    figure: "of it, start-up's file pages released by the agent (its log: RssFile before -> after each phase)",
    value: startupReleases(readFileSync(agent.logFile, 'utf8')),
  });

  // The full conntrack re-dump, run here at CONNTRACK_RESYNC_S instead of its default 10 min to
  // see one, measured like the re-read above.
  const r0 = resyncs(after);
  // Before the re-dump, the same event rate with no entry the agent keeps: what reading and
  // pre-checking events costs alone.
  const bare = await eventLoad(agent.pid, node.path, opt.window / 2, Number.MAX_SAFE_INTEGER, toVip);
  if (bare.run.refused > 0)
    log(
      `INVALID RUN: the kernel refused ${bare.run.refused} entries of the window with none towards VIPs (first: ${bare.run.firstRefusal})`,
    );
  rows.push({
    figure: `CPU at ${(bare.run.events / bare.run.seconds).toFixed(0)} events/s, none towards VIPs (${bare.run.seconds.toFixed(0)} s)`,
    value: `${bare.cpu.toFixed(2)} % of a core (user ${bare.user.toFixed(1)}, sys ${bare.sys.toFixed(1)})`,
    target: `<= ${TARGET.eventCpuPct} %`,
    pass: bare.cpu <= TARGET.eventCpuPct,
  });
  if (performance.now() > readyAt + CONNTRACK_RESYNC_S * 1000 - 2000)
    throw new Error(
      `--window ${opt.window} is too long: the conntrack re-dump at ${CONNTRACK_RESYNC_S} s after ready came before its measurement`,
    );
  const dump = await burst(agent.pid, readyAt + CONNTRACK_RESYNC_S * 1000);
  const end = memory(agent.pid);
  const last = await metrics();
  const seen = [metricSum(last, 'clbprobe_resyncs_total', 'source="nat"') - c0, resyncs(last) - r0];
  rows.push({
    figure: `periodic re-read of NAT/IPVS/addresses${opt.cluster === 'file' ? '/cluster file' : ''} (${seen[0]} seen), busy ${light.busyS.toFixed(1)} s`,
    value: `${light.cpuS.toFixed(2)} s CPU = ${((light.cpuS / 60) * 100).toFixed(2)} % of a core at 60 s`,
    pass: seen[0]! >= 1,
  });
  rows.push({
    figure: `periodic full conntrack re-dump (${seen[1]} seen), busy ${dump.busyS.toFixed(1)} s`,
    value: `${dump.cpuS.toFixed(2)} s CPU = ${((dump.cpuS / 600) * 100).toFixed(2)} % of a core at 10 min`,
    pass: seen[1] === 1,
  });
  rows.push({
    figure: 'at the end: VmRSS / VmHWM',
    value: `${end.rss.toFixed(1)} / ${end.hwm.toFixed(1)} MB`,
    target: `peak < ${TARGET.peakMB} MB`,
    pass: end.hwm < TARGET.peakMB,
  });
  rows.push(...scrapeRows('plain, e.g. curl without --compressed', scrapeTimes(agent.url, false, opt.scrapes), series));
  const afterPlain = memory(agent.pid);
  rows.push({
    figure: 'after the plain scrapes: VmRSS / VmHWM',
    value: `${afterPlain.rss.toFixed(1)} / ${afterPlain.hwm.toFixed(1)} MB`,
  });
  await stopAgent(agent);
}

/** --start-only: the memory figures once start-up and the first sync are over. */
function startOnlyRows(m: ReturnType<typeof memory>, agentLog: string): void {
  rows.push({
    figure: `VmRSS ${startOnlyS} s after ready (anonymous / file)`,
    value: `${m.rss.toFixed(1)} MB (${m.anon.toFixed(1)} / ${m.file.toFixed(1)})`,
  });
  rows.push({
    figure: 'peak RSS so far (VmHWM)',
    value: `${m.hwm.toFixed(1)} MB`,
    target: `< ${TARGET.peakMB} MB`,
    pass: m.hwm < TARGET.peakMB,
  });
  rows.push({ figure: "start-up's file pages released by the agent", value: startupReleases(agentLog) });
}

/** curl's time for n scrapes of /metrics, and the size of the last body as sent. */
function scrapeTimes(url: string, gzip: boolean, n: number): { times: number[]; size: number } {
  const times: number[] = [];
  let size = 0;
  for (let i = 0; i < n; i++) {
    const headers = gzip ? ['-H', 'Accept-Encoding: gzip'] : [];
    const r = spawnSync(
      'curl',
      ['-sf', ...headers, '-o', '/dev/null', '-w', '%{time_total} %{size_download}', `${url}/metrics`],
      { encoding: 'utf8' },
    );
    const [sec, bytes] = r.stdout.split(' ').map(Number);
    if (r.status !== 0 || !sec || !bytes) throw new Error(`curl /metrics failed: ${r.stderr}`);
    times.push(sec * 1000);
    size = bytes;
  }
  return { times, size };
}

/** The scrape rows; `judged`: the target applies (a quiet box), else the figure is only reported. */
function scrapeRows(how: string, s: { times: number[]; size: number }, series: number, judged = true): Row[] {
  const median = pct(s.times, 50);
  const p99 = pct(s.times, 99);
  const t = (v: number): Pick<Row, 'target' | 'pass'> =>
    judged ? { target: `< ${TARGET.scrapeMs} ms`, pass: v < TARGET.scrapeMs } : {};
  return [
    {
      figure: `/metrics over HTTP (${how}), median of ${s.times.length} scrapes (${(s.size / 1024).toFixed(0)} KiB, ${series} samples)`,
      value: `${median.toFixed(1)} ms`,
      ...t(median),
    },
    {
      figure: `/metrics over HTTP (${how}), p99 of ${s.times.length} scrapes`,
      value: `${p99.toFixed(1)} ms`,
      ...t(p99),
    },
  ];
}

/**
 * The same gzip scrapes with the box loaded: a busy loop in another process (stress-style, one
 * core of this 2-core box), started before and killed after. Reported beside the quiet figure.
 */
function loadedScrapeTimes(url: string, n: number): { times: number[]; size: number } {
  const busy = spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
  try {
    spawnSync('sleep', ['0.5']);
    return scrapeTimes(url, true, n);
  } finally {
    busy.kill('SIGKILL');
  }
}

/**
 * The agent's cluster source: by default the Kubernetes API as deployed (list/watch from the fake
 * API server of the tests, served from this process, through a kubeconfig with a token), or
 * --cluster file (the same objects in a --cluster-file).
 */
async function clusterSource(dir: string, list: { items: object[] }): Promise<string[]> {
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

/** CPU seconds of pid from 2 s before dueAt until it has been quiet for 1 s after dueAt + 1 s. */
async function burst(pid: number, dueAt: number): Promise<{ cpuS: number; busyS: number }> {
  await sleep(Math.max(0, dueAt - 2000 - performance.now()));
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  let last = cpu0;
  let quietSince = t0;
  while (performance.now() < dueAt + 1000 || performance.now() - quietSince < 1000) {
    await sleep(250);
    const c = cpuSeconds(pid);
    if (c - last > 0.02) quietSince = performance.now();
    last = c;
    if (performance.now() - t0 > 120_000)
      throw new Error('the agent did not go quiet within 120 s of a periodic re-read');
  }
  return { cpuS: last - cpu0, busyS: Math.max(0, quietSince - dueAt) / 1000 };
}

/** kube-proxy's rules for the cluster (--node-mode) into the node namespace, with the real restore tools. */
function loadKubeProxyRules(node: Netns, dir: string, items: object[]): void {
  const t0 = performance.now();
  const rulesFile = join(dir, 'kube-proxy.rules');
  let what: string;
  if (opt.nodeMode === 'iptables') {
    const r = kubeProxyRules(items);
    writeFileSync(rulesFile, r.text);
    node.sh(`iptables-restore < ${rulesFile}`);
    what = `iptables mode, kube-proxy 1.20 format: ${r.rules} rule lines`;
  } else {
    const r = kubeProxyIpvsRules(items);
    const setsFile = join(dir, 'kube-proxy.ipset');
    writeFileSync(setsFile, r.ipset);
    writeFileSync(rulesFile, r.iptables);
    node.sh(`ipset restore < ${setsFile} && iptables-restore < ${rulesFile}`);
    what = `IPVS mode, kube-proxy 1.28 layout: ${r.members} ipset members, ${r.loadBalancerEntries} in KUBE-LOAD-BALANCER; no IPVS table (no ip_vs on this kernel): the figures cover the rules and sets, not IPVS virtual servers`;
  }
  // 20 MB at 5,000 Services: past spawnSync's default 1 MiB buffer.
  const save = spawnSync('ip', ['netns', 'exec', node.name, 'iptables-save'], {
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  }).stdout;
  log(
    `kube-proxy rules (${what}) loaded in ${((performance.now() - t0) / 1000).toFixed(1)} s; iptables-save prints ${(save.length / 2 ** 20).toFixed(1)} MB`,
  );
  ref.push({
    figure: `kube-proxy rules on the node (--node-mode ${opt.nodeMode})`,
    value: `${save.split('\n').filter((l) => l.startsWith('-A')).length} rule lines, ${(save.length / 2 ** 20).toFixed(1)} MB saved`,
  });
  if (opt.nodeMode === 'ipvs')
    ref.push({ figure: 'IPVS table (kube-ipvs0, virtual servers)', value: 'absent: this kernel has no ip_vs' });
}

const conntrackMax = (): number => Number(readFileSync('/proc/sys/net/netfilter/nf_conntrack_max', 'utf8'));
/** Entries in one namespace's table (the limit is machine-wide, the count per namespace). */
const conntrackCount = (ns: Netns): number => Number(ns.run('cat', '/proc/sys/net/netfilter/nf_conntrack_count'));

/** RSS of a node process that loaded nothing: what the runtime alone costs here. */
async function bareNodeRss(): Promise<void> {
  const p = spawn(NODE, ['-e', 'setTimeout(() => {}, 5000)'], { stdio: 'ignore' });
  undo.push(() => p.kill('SIGKILL'));
  await sleep(500);
  ref.push({ figure: 'bare node process RSS (node -e, nothing loaded)', value: `${memory(p.pid!).rss.toFixed(1)} MB` });
  p.kill('SIGKILL');
}

function print(): void {
  const w = Math.max(...[...rows, ...ref].map((r) => r.figure.length));
  const line = (r: Row) =>
    `${r.figure.padEnd(w)}  ${r.value.padEnd(36)}  ${(r.target ?? '').padEnd(10)}  ${r.pass === undefined ? '' : r.pass ? 'pass' : 'FAIL'}`;
  console.log(
    `\nclbprobe agent benchmark: ${opt.entries} conntrack entries (${opt.vipEntries} towards ${opt.activeVips} VIP:ports), ${opt.services} Services, ${opt.endpoints} endpoints, kube-proxy rules: ${opt.nodeMode === 'none' ? 'none' : `${opt.nodeMode} mode`}`,
  );
  const commit = spawnSync('git', ['-C', import.meta.dirname, 'describe', '--always', '--dirty'], {
    encoding: 'utf8',
  }).stdout.trim();
  console.log(
    `command: ${process.argv.slice(1).join(' ')}; agent ${CLI} at ${commit}; node ${NODE_VERSION} (${NODE}) ${nodeFlags.join(' ')}, MALLOC_ARENA_MAX=${mallocArenaMax}`,
  );
  console.log(
    `load average at the end: ${loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')} (2 shared cores)`,
  );
  console.log(`${'figure'.padEnd(w)}  ${'value'.padEnd(36)}  ${'target'.padEnd(10)}  result`);
  for (const r of rows) console.log(line(r));
  console.log('reference, same run:');
  for (const r of ref) console.log(line(r));
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench/agent needs root (network namespaces, ctnetlink, eBPF)');
  if (!existsSync(CLI)) throw new Error(`${CLI} missing: run npm run build first`);
  log(
    `load average at start: ${loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}`,
  );
  const dir = mkdtempSync(join(tmpdir(), 'cbk-bench-'));
  undo.push(() => rmSync(dir, { recursive: true, force: true }));
  if (keepLogs) {
    undo.push(() => {
      mkdirSync(keepLogs, { recursive: true });
      for (const f of agentLogs) if (existsSync(f)) copyFileSync(f, join(keepLogs, basename(f)));
    });
  }
  await bareNodeRss();
  if (opt.loops > 0) await loopLatency(dir); // --loops 0: no loop lab (e.g. with --cpu-prof, which slows its first connect)
  await bigNode(dir);
  print();
}

main()
  .then(() => {
    cleanup();
    process.exit(rows.every((r) => r.pass !== false) ? 0 : 1);
  })
  .catch((e: unknown) => {
    console.error(`bench/agent: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
    for (const f of agentLogs)
      if (existsSync(f))
        console.error(`--- last lines of ${f}\n${readFileSync(f, 'utf8').split('\n').slice(-15).join('\n')}`);
    print();
    cleanup();
    process.exit(1);
  });
