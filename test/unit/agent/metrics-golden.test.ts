// The whole /metrics text of the agent, end to end, against a golden file (as
// node_exporter's end-to-end-test.sh does with collector/fixtures): a bundle of
// captured fixture files is the agent's inputs (every polled source reads its
// files with its own fromBundle, conntrack comes from the bundle's table, the
// cluster from its cluster.json), the real Agent wires them, and /metrics is
// fetched over HTTP from the real metrics server, gzipped as Prometheus asks.
// Needs no root: run it as nobody with
//   setpriv --reuid=65534 --regid=65534 --clear-groups npx vitest run test/unit/agent/metrics-golden.test.ts
// Regenerate after an intended change: UPDATE_GOLDEN=1 npx vitest run test/unit/agent/metrics-golden.test.ts
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { get, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent } from '../../../src/agent/agent.js';
import { bundleInputs } from '../../../src/agent/bundle-inputs.js';
import { createAgentRegistry } from '../../../src/agent/metrics/list.js';
import { createMetricsServer } from '../../../src/export/server.js';
import { formatConntrack } from '../../../src/kernel/conntrack/format.js';
import type { NodeSnapshot } from '../../../src/source/node-snapshot.js';

const FX = join(import.meta.dirname, '../../fixtures');
const GOLDEN = join(import.meta.dirname, 'metrics-golden.txt');

/**
 * An IPVS node whose LB IPs are not bound on kube-ipvs0, with a pod's connection looping through
 * the LB (the tke-ipvs-unbound-l4-loop case): bundle name → fixture path under test/fixtures.
 */
const BUNDLE = {
  'ip-addr.json': 'text/ip-d-addr.json',
  'ip-route-local.json': 'routes/plain.local.v4.json',
  'iptables-save.txt': 'nat/ipvs-1.28.v4.save',
  'ipset.txt': 'nat/ipvs-1.28.ipset-list.txt',
  'nft-ruleset.json': 'nft/ruleset-ipvs-1.28-iptables-nft.json',
  'cluster.json': 'bundles/tke-ipvs-unbound-l4-loop/cluster.json',
};

/**
 * The case's IPVS table and conntrack entries, written as `collect` writes them: clbprobe's IPVS
 * dump (ipvs.json) and `conntrack -L -o extended,id` text.
 */
const CASE_NODE = join(FX, 'bundles/tke-ipvs-unbound-l4-loop/node.json');

/**
 * What varies from run to run, named here and nowhere else: prom-client's process and Node.js
 * families (left out whole), and how long each source's read took (the series stay, the value
 * is replaced).
 */
const VARYING_FAMILY = /^(process|nodejs)_/;
const DURATION = /^(clbprobe_source_duration_seconds\{[^}]*\}) \S+$/;

function stable(text: string): { text: string; dropped: string[] } {
  const dropped = new Set<string>();
  const families = text.split(/\n(?=# HELP )/);
  const kept = families.filter((f) => {
    const name = /^# HELP (\S+)/.exec(f)?.[1] ?? '';
    if (!VARYING_FAMILY.test(name)) return true;
    dropped.add(name);
    return false;
  });
  const lines = kept
    .join('\n')
    .split('\n')
    .map((l) => l.replace(DURATION, '$1 <duration>'));
  return { text: `${lines.join('\n').trimEnd()}\n`, dropped: [...dropped] };
}

function fetchMetrics(port: number, gzip: boolean): Promise<{ encoding?: string; body: Buffer }> {
  return new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port, path: '/metrics', headers: gzip ? { 'accept-encoding': 'gzip' } : {} }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (b: Buffer) => parts.push(b));
      res.on('end', () =>
        resolve({
          ...(res.headers['content-encoding'] ? { encoding: res.headers['content-encoding'] } : {}),
          body: Buffer.concat(parts),
        }),
      );
      res.on('error', reject);
    }).on('error', reject);
  });
}

describe('agent /metrics end to end, from a bundle', () => {
  let dir: string;
  let agent: Agent;
  let http: Server;
  let port: number;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'cbaa-golden-'));
    for (const [name, from] of Object.entries(BUNDLE)) copyFileSync(join(FX, from), join(dir, name));
    const node = JSON.parse(readFileSync(CASE_NODE, 'utf8')) as NodeSnapshot;
    writeFileSync(join(dir, 'ipvs.json'), JSON.stringify(node.ipvs));
    writeFileSync(
      join(dir, 'conntrack.txt'),
      node.conntrack!.entries!.map((e) => `${formatConntrack(e, { extended: true, id: true })}\n`).join(''),
    );
    const inputs = bundleInputs(dir);
    agent = new Agent({
      nodeName: 'node-a',
      version: 'golden',
      log: pino({ level: 'silent' }),
      capture: 'off',
      clusterFile: inputs.clusterFile!,
      clusterApi: false,
      resyncIntervalS: 3600,
      conntrackResyncIntervalS: 3600,
      inputs,
    });
    // As `clbprobe agent` serves it: prom-client's process metrics included.
    http = createMetricsServer({
      registry: createAgentRegistry(() => agent.metricsState(), { maxServicePorts: 100, processMetrics: true }),
      ready: () => agent.ready,
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    port = (http.address() as AddressInfo).port;
    await agent.start();
  });

  afterAll(async () => {
    http?.closeAllConnections();
    http?.close();
    await agent?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves the golden /metrics text (gzip as Prometheus asks, and plain the same)', async () => {
    const zipped = await fetchMetrics(port, true);
    expect(zipped.encoding).toBe('gzip');
    const text = gunzipSync(zipped.body).toString();
    const { text: got, dropped } = stable(text);
    expect(stable((await fetchMetrics(port, false)).body.toString()).text).toBe(got);
    // The filter only takes out what it names, and the process metrics are there to take out.
    expect(dropped).toContain('process_cpu_seconds_total');
    expect(dropped).toContain('nodejs_heap_size_used_bytes');
    if (process.env.UPDATE_GOLDEN) writeFileSync(GOLDEN, got);
    expect(got).toBe(readFileSync(GOLDEN, 'utf8'));
  });

  it('reads every source from the bundle, and diagnoses the loop the bundle holds', async () => {
    const text = gunzipSync((await fetchMetrics(port, true)).body).toString();
    for (const source of ['addresses', 'ipvs', 'nat', 'conntrack', 'cluster'])
      expect(text).toContain(`clbprobe_source_up{source="${source}"} 1\n`);
    // TKE-style IPVS: the LB IP is neither bound on kube-ipvs0 nor an IPVS virtual server.
    expect(text).toContain(
      'clbprobe_lb_ip_bound{namespace="shop",service="api",port="80",protocol="TCP",ip="192.0.2.20"} 0\n',
    );
    expect(text).toContain(
      'clbprobe_findings_active{namespace="shop",service="api",port="80",protocol="TCP",mechanism="L4-loop",severity="active"} 1\n',
    );
  });
});
