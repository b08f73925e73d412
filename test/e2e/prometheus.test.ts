// End to end, real kernel and a real Prometheus: two namespace labs (one
// Service whose pod→LB traffic loops, ETP=Local; one protected by SNAT,
// ETP=Cluster), the compiled `clbprobe agent` in each lab's node1 namespace
// with eBPF counters on its uplink, Debian's prometheus scraping both from a
// scrape namespace joined to the nodes by veths. Client connections are
// driven, then Prometheus' HTTP API must show the loop for one Service only,
// and `clbprobe evidence` must show the loop pair. Namespaces are cba-*.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, clusterList, createLoopLab, type Etp, type LoopLab } from '../../src/demo/lab.js';
import { Netns, vethPair } from '../../src/demo/netns.js';
import { isRoot } from '../support/netns.js';
import { until } from '../support/wait.js';

const CLI = join(import.meta.dirname, '../../dist/src/cli/main.js');
const PROMETHEUS = '/usr/bin/prometheus';
const PREFIX = 'cba-';

interface Node {
  name: 'web-loop' | 'web-safe';
  lab: LoopLab;
  /** The node's address on the scrape link. */
  scrapeIp: string;
  socket: string;
  agent?: ChildProcess;
  stderr: string;
}

/** The lab's cluster file with the Service renamed, so the two labs' Services differ in Prometheus. */
function writeClusterFile(dir: string, etp: Etp, name: string): string {
  const list = clusterList(etp) as { items: { kind: string; metadata: { name: string; labels?: Record<string, string> } }[] };
  for (const item of list.items) {
    if (item.kind === 'Service') item.metadata.name = name;
    if (item.kind === 'EndpointSlice') item.metadata.labels!['kubernetes.io/service-name'] = name;
  }
  const path = join(dir, `${name}.json`);
  writeFileSync(path, JSON.stringify(list));
  return path;
}

function inNs(ns: Netns, cmd: string, args: string[], timeout = 10_000): string {
  const r = spawnSync('ip', ['netns', 'exec', ns.name, cmd, ...args], { encoding: 'utf8', timeout });
  return r.stdout ?? '';
}

/** Sum of loop_return packets for a Service in one agent's /metrics (read inside its namespace). */
function loopReturnFromMetrics(n: Node): number {
  const text = inNs(n.lab.node, 'curl', ['-sf', 'http://127.0.0.1:9811/metrics']);
  const re = new RegExp(`^clbprobe_lb_path_packets_total\\{[^}]*service="${n.name}"[^}]*kind="loop_return"[^}]*\\} (\\d+)`, 'gm');
  return [...text.matchAll(re)].reduce((s, m) => s + Number(m[1]), 0);
}

type PromResult = { metric: Record<string, string>; value: [number, string] }[];

describe.skipIf(!isRoot || !existsSync(PROMETHEUS))('agent metrics through a real Prometheus (netns cluster)', () => {
  let dir: string;
  let scrape: Netns;
  let prometheus: ChildProcess | undefined;
  const nodes: Node[] = [];

  const query = (q: string): PromResult => {
    const out = inNs(scrape, 'curl', ['-sfG', 'http://127.0.0.1:9090/api/v1/query', '--data-urlencode', `query=${q}`]);
    if (!out) return [];
    return (JSON.parse(out) as { data: { result: PromResult } }).data.result;
  };
  const byService = (r: PromResult) => Object.fromEntries(r.map((x) => [x.metric.service, Number(x.value[1])]));

  beforeAll(async () => {
    if (!existsSync(CLI)) throw new Error(`${CLI} missing: run npm run build first`);
    dir = mkdtempSync(join(tmpdir(), 'cba-e2e-'));
    try {
      const [loop, safe] = await Promise.all([createLoopLab('Local', PREFIX), createLoopLab('Cluster', PREFIX)]);
      nodes.push(
        { name: 'web-loop', lab: loop, scrapeIp: '192.168.77.2', socket: join(dir, 'loop.sock'), stderr: '' },
        { name: 'web-safe', lab: safe, scrapeIp: '192.168.77.6', socket: join(dir, 'safe.sock'), stderr: '' },
      );
      scrape = Netns.create(PREFIX);
      for (const [i, n] of nodes.entries()) {
        vethPair(scrape, `s${i}`, n.lab.node, 'scrape0');
        scrape.run('ip', 'addr', 'add', `192.168.77.${i * 4 + 1}/30`, 'dev', `s${i}`);
        n.lab.node.run('ip', 'addr', 'add', `${n.scrapeIp}/30`, 'dev', 'scrape0');
        const etp: Etp = n.name === 'web-loop' ? 'Local' : 'Cluster';
        const args = [
          CLI, 'agent', '--cluster-file', writeClusterFile(dir, etp, n.name), '--node-name', LAB.node1Name,
          '--listen', ':9811', '--interface', 'eth0', '--capture', 'ebpf', '--evidence-socket', n.socket, '--log-level', 'info',
        ];
        n.agent = spawn('ip', ['netns', 'exec', n.lab.node.name, process.execPath, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
        n.agent.stderr!.on('data', (b: Buffer) => (n.stderr += b.toString()));
      }
      writeFileSync(
        join(dir, 'prometheus.yml'),
        `global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: clbprobe\n    static_configs:\n      - targets: [${nodes.map((n) => `'${n.scrapeIp}:9811'`).join(', ')}]\n`,
      );
      prometheus = spawn(
        'ip',
        ['netns', 'exec', scrape.name, PROMETHEUS, `--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'tsdb')}`,
          '--web.listen-address=127.0.0.1:9090', '--log.level=warn'],
        { stdio: 'ignore' },
      );
      for (const n of nodes) {
        await until(`agent ${n.name} ready (stderr: ${n.stderr})`, 20_000, () =>
          inNs(n.lab.node, 'curl', ['-sf', 'http://127.0.0.1:9811/readyz']).startsWith('ready') ? true : undefined,
        );
      }
    } catch (e) {
      cleanup();
      throw e;
    }
  }, 60_000);

  function cleanup(): void {
    prometheus?.kill('SIGKILL');
    for (const n of nodes) {
      n.agent?.kill('SIGKILL');
      n.lab.destroy();
    }
    scrape?.delete();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
  afterAll(cleanup);

  it('loop_return counts for the looping Service only, its L4-loop finding is 1, and evidence shows the pair', async () => {
    const [loop, safe] = nodes as [Node, Node];
    expect(loopReturnFromMetrics(loop)).toBe(0);
    const t0 = performance.now();
    const loopConnect = loop.lab.connect(1500);
    await until('loop_return in the agent /metrics', 5000, () => (loopReturnFromMetrics(loop) > 0 ? true : undefined));
    const toMetricsMs = performance.now() - t0;
    const [looped, safeConnect] = await Promise.all([loopConnect, safe.lab.connect(3000)]);
    expect(looped).toBe('timeout');
    expect(safeConnect).toBe('connected node2');

    const counts = await until('Prometheus to scrape the loop', 15_000, () => {
      const r = byService(query('sum by (service) (clbprobe_lb_path_packets_total{kind="loop_return"})'));
      return r['web-loop']! > 0 && r['web-safe'] !== undefined ? r : undefined;
    });
    expect(counts['web-safe']).toBe(0);
    // The protected Service's pod→LB traffic was counted, so its zero is not vacuous.
    const toLb = byService(query('sum by (service) (clbprobe_lb_path_packets_total{kind="to_lb"})'));
    expect(toLb['web-safe']).toBeGreaterThan(0);

    const findings = await until('the L4-loop finding in Prometheus', 10_000, () => {
      const r = query('clbprobe_findings_active{mechanism="L4-loop",severity="active"}');
      return r.length ? r : undefined;
    });
    expect(findings.map((f) => [f.metric.service, f.value[1]])).toEqual([['web-loop', '1']]);
    // Both agents read conntrack, NAT and the capture counters. This kernel has no IPVS: not a
    // failure, so there is no ipvs series at all (a 0 would page ClbprobeSourceDown forever).
    for (const source of ['conntrack', 'capture', 'nat', 'addresses', 'cluster']) {
      expect(query(`clbprobe_source_up{source="${source}"}`).map((r) => r.value[1])).toEqual(['1', '1']);
    }
    expect(query('clbprobe_source_up{source="ipvs"}')).toEqual([]);
    expect(query('clbprobe_errors_total{source="ipvs"}')).toEqual([]);

    const ev = inNs(loop.lab.node, process.execPath, [CLI, 'evidence', '--service', 'lab/web-loop', '--json', '--socket', loop.socket]);
    const lines = ev.trim().split('\n').map((l) => JSON.parse(l) as { type: string; class?: string; line?: string });
    const pair = lines.filter((l) => l.class === 'loopback_pair').map((l) => l.line!);
    expect(pair.some((l) => l.includes(`src=${LAB.clientPod} dst=${LAB.vip}`) && l.includes('[UNREPLIED]'))).toBe(true);
    expect(pair.some((l) => l.includes(`src=${LAB.clientPod} dst=${LAB.node1}`) && l.includes(`dport=${LAB.nodePort}`))).toBe(true);
    console.log(`looping connect -> loop_return in /metrics: ${toMetricsMs.toFixed(0)} ms`);
  });

  it('SIGTERM: each agent detaches and exits within 5 s', async () => {
    for (const n of nodes) {
      const t0 = performance.now();
      const exited = new Promise<number | null>((r) => n.agent!.once('exit', (code) => r(code)));
      n.agent!.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(performance.now() - t0).toBeLessThan(5000);
      // No clbprobe program left on the uplink.
      expect(inNs(n.lab.node, 'tc', ['filter', 'show', 'dev', 'eth0', 'ingress'])).not.toMatch(/clbp/);
    }
  });
});
