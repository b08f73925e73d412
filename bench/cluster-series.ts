// What a cluster's clbprobe agents cost the Prometheus that scrapes them: N nodes' /metrics,
// rendered by the agent's own registry over a real cluster view of S LB Services, each node with
// K active Service ports (a pod calling them through the LB: packets, an open entry, a finished
// flow) and L nodes looping through one Service. The real Prometheus of the tests scrapes every
// node as its own target, with deploy/prometheusrule.yaml's recording rules, on loopback.
//   node --import tsx bench/cluster-series.ts [--nodes 1000] [--services 5000] [--active 20]
//     [--looping 10] [--scrapes 4] [--interval 15]
// Prints the samples per node (idle, active), Prometheus' head series, its RSS, and the cluster's
// answers read from the recording rules.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { load } from 'js-yaml';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { ConntrackTable } from '../src/agent/conntrack-table.js';
import { createAgentRegistry } from '../src/agent/metrics/list.js';
import { parseSamples } from '../src/export/parse-samples.js';
import {
  finding,
  loopReturn,
  nodePortOf,
  testAgentState,
  testCounter,
  toLb,
  vipEntry,
} from '../test/support/metrics-state.js';

const argv = process.argv.slice(2);
const arg = (name: string, fallback: number): number => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const opt = {
  nodes: arg('--nodes', 1000),
  services: arg('--services', 5000),
  active: arg('--active', 20),
  looping: arg('--looping', 10),
  scrapes: arg('--scrapes', 4),
  interval: arg('--interval', 15),
};
const PROMETHEUS = '/usr/bin/prometheus';
/** The Service every looping node loops through. */
const LOOPING_SERVICE = 42;

const log = (...a: unknown[]) => console.error('[cluster-series]', ...a);

/** A deterministic pseudo-random sequence, so runs compare. */
function random(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    return x / 0x7fffffff;
  };
}

interface SimNode {
  /** Renders the node's /metrics now, its counters having grown since the last scrape. */
  scrape(): Promise<string>;
}

/** The nodes, each with the agent's registry over its own state; process metrics from one real process. */
async function simulatedNodes(): Promise<{ nodes: SimNode[]; idleSamples: number }> {
  const base = testAgentState(opt.services);
  const processRegistry = new Registry();
  collectDefaultMetrics({ register: processRegistry });
  await new Promise((r) => setTimeout(r, 500));
  const processText = await processRegistry.metrics();
  const rand = random(7);
  const nodes: SimNode[] = [];
  for (let n = 0; n < opt.nodes; n++) {
    const counter = testCounter();
    const table = new ConntrackTable(base.state.index);
    const state = {
      ...base.state,
      nodeName: `node-${n}`,
      counter,
      table,
      findings: [] as ReturnType<typeof finding>[],
    };
    const ports = new Set<number>();
    while (ports.size < opt.active) ports.add(Math.floor(rand() * opt.services));
    const looping = n < opt.looping;
    if (looping) ports.add(LOOPING_SERVICE);
    let id = n * 1000;
    for (const i of ports) {
      counter.samples.push(toLb(i, 1 + Math.floor(rand() * 1e6)));
      table.upsert(vipEntry(i, ++id, true), Date.now());
      const done = vipEntry(i, ++id, true);
      table.upsert(done, Date.now());
      table.event('DESTROY', done, Date.now());
    }
    if (looping) {
      counter.samples.push(loopReturn(nodePortOf(LOOPING_SERVICE), 500));
      state.findings = [finding(LOOPING_SERVICE, 'L4-loop', 'active')];
    }
    const registry = createAgentRegistry(() => state, { maxServicePorts: 500, processMetrics: false });
    nodes.push({
      async scrape() {
        for (const c of counter.samples) {
          const more = 1 + Math.floor(rand() * 100);
          c.packets += more;
          c.bytes += more * 60;
        }
        return `${await registry.metrics()}\n${processText}`;
      },
    });
  }
  const idle = { ...base.state, table: new ConntrackTable(base.state.index) };
  const idleText = await createAgentRegistry(() => idle, { maxServicePorts: 500, processMetrics: false }).metrics();
  return { nodes, idleSamples: parseSamples(`${idleText}\n${processText}`).length };
}

/** deploy/prometheusrule.yaml's groups as a Prometheus rule file. */
function ruleFile(dir: string): string {
  const rule = load(readFileSync(join(import.meta.dirname, '../deploy/prometheusrule.yaml'), 'utf8')) as {
    spec: { groups: unknown[] };
  };
  const path = join(dir, 'rules.yaml');
  writeFileSync(path, JSON.stringify({ groups: rule.spec.groups }));
  return path;
}

async function query(
  promPort: number,
  q: string,
): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
  const res = await fetch(`http://127.0.0.1:${promPort}/api/v1/query?query=${encodeURIComponent(q)}`);
  const body = (await res.json()) as {
    data: { result: { metric: Record<string, string>; value: [number, string] }[] };
  };
  return body.data.result;
}

async function main(): Promise<void> {
  const t0 = performance.now();
  const { nodes, idleSamples } = await simulatedNodes();
  const counts = await Promise.all(nodes.map(async (n) => parseSamples(await n.scrape()).length));
  const total = counts.reduce((a, b) => a + b, 0);
  log(`set up ${opt.nodes} nodes in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

  const server = createServer((req, res) => {
    const m = /^\/node\/(\d+)\/metrics$/.exec(req.url ?? '');
    const node = m ? nodes[Number(m[1])] : undefined;
    if (!node) return void res.writeHead(404).end();
    node.scrape().then(
      (text) => res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4' }).end(text),
      (e: unknown) => res.writeHead(500).end(String(e)),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const dir = mkdtempSync(join(tmpdir(), 'cbs-cluster-series-'));
  const promPort = port + 1;
  const targets = nodes.map((_, n) => ({
    targets: [`127.0.0.1:${port}`],
    labels: { __metrics_path__: `/node/${n}/metrics`, node: `node-${n}` },
  }));
  writeFileSync(
    join(dir, 'prometheus.yml'),
    JSON.stringify({
      global: { scrape_interval: `${opt.interval}s`, evaluation_interval: `${opt.interval}s` },
      rule_files: [ruleFile(dir)],
      scrape_configs: [{ job_name: 'clbprobe', honor_labels: true, static_configs: targets }],
    }),
  );
  const prom = spawn(
    PROMETHEUS,
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'tsdb')}`,
      `--web.listen-address=127.0.0.1:${promPort}`,
      '--log.level=warn',
    ],
    {
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  const stop = () => {
    prom.kill('SIGKILL');
    server.close();
    rmSync(dir, { recursive: true, force: true });
  };
  process.on('SIGINT', () => {
    stop();
    process.exit(1);
  });
  try {
    const waitS = opt.interval * opt.scrapes + 10;
    log(`Prometheus scrapes ${opt.nodes} targets every ${opt.interval} s; reading its head after ${waitS} s`);
    await new Promise((r) => setTimeout(r, waitS * 1000));
    const own = parseSamples(await (await fetch(`http://127.0.0.1:${promPort}/metrics`)).text());
    const ownValue = (name: string) => own.find((x) => x.name === name)?.value ?? NaN;
    const head = ownValue('prometheus_tsdb_head_series');
    const rssMB = ownValue('process_resident_memory_bytes') / 1e6;
    const promRss = readFileSync(`/proc/${prom.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)?.[1];
    const up = (await query(promPort, 'count(up == 1)'))[0]?.value[1];
    const loopNodes = await query(promPort, 'service:clbprobe_loop_nodes:count');
    const looped = await query(promPort, 'service_kind:clbprobe_lb_path_packets:rate5m{kind="loop_return"} > 0');
    const rows: [string, string][] = [
      ['nodes (targets up)', `${opt.nodes} (${up})`],
      ['LB Services in the cluster', String(opt.services)],
      ['active Service ports per node', `${opt.active} (+1 on the ${opt.looping} looping nodes)`],
      ['samples per idle node', String(idleSamples)],
      [
        'samples per node, min / median / max',
        `${Math.min(...counts)} / ${counts.sort((a, b) => a - b)[counts.length >> 1]} / ${Math.max(...counts)}`,
      ],
      ['samples per scrape round, all nodes', String(total)],
      ['Prometheus head series (with recording rules)', String(head)],
      ['Prometheus RSS (VmRSS)', `${(Number(promRss) / 1024).toFixed(0)} MB (its own gauge: ${rssMB.toFixed(0)} MB)`],
      [
        'service:clbprobe_loop_nodes:count',
        loopNodes.map((r) => `${r.metric.service}=${r.value[1]}`).join(' ') || 'none',
      ],
      [
        'looped packets/s (service_kind rate5m)',
        looped.map((r) => `${r.metric.service}=${Number(r.value[1]).toFixed(1)}`).join(' ') || 'none yet',
      ],
    ];
    const width = Math.max(...rows.map(([k]) => k.length));
    console.log(rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join('\n'));
  } finally {
    stop();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
