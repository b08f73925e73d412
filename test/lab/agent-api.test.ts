// The agent and `diagnose` with the Kubernetes API as their cluster source
// (--kubeconfig), against the list/watch fake API server: the compiled agent
// reads a looping lab node's datapath (--netns) and must
// - count the loop for the Service it listed,
// - pick up a Service added later from the watch alone (no resync),
// - keep serving its last view when the API goes away (source_up{cluster} 0),
//   and recover when it comes back.
// `clbprobe diagnose --kubeconfig` on the same lab names the active loop.
// Namespaces are cbw-*; the fake API and /metrics listen on 127.0.0.1.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterList, createLoopLab, LAB, type LoopLab } from '../../src/demo/lab.js';
import { parseSamples, type Sample } from '../../src/export/parse-samples.js';
import { FakeApiServer, type ResourceName } from '../support/fake-apiserver.js';
import { isRoot } from '../support/netns.js';
import { CLI, requireBuiltCli } from '../support/run-cli.js';
import { shippedAgent } from '../support/shipped-agent.js';
import { freePort, until } from '../support/wait.js';

const PREFIX = 'cbw-';
const RESOURCE_OF: Record<string, ResourceName> = {
  Service: 'services',
  EndpointSlice: 'endpointslices',
  Node: 'nodes',
};

/** until(), with a failed fetch (agent or API not listening yet) counted as "not yet". */
const poll = <T>(what: string, ms: number, f: () => Promise<T | undefined>): Promise<T> =>
  until(what, ms, () => f().catch(() => undefined), 100);

const find = (s: Sample[], name: string, labels: Record<string, string>): number | undefined =>
  s.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))?.value;

describe.skipIf(!isRoot)('agent and diagnose with --kubeconfig (fake API server, real kernel)', () => {
  let lab: LoopLab;
  let dir: string;
  let followedAtStart = 0;
  let kubeconfig: string;
  let agent: ChildProcess | undefined;
  let stderr = '';
  let metricsUrl: string;
  const api = new FakeApiServer();

  const scrape = async (): Promise<Sample[]> => {
    const res = await fetch(metricsUrl);
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    return parseSamples(await res.text());
  };

  beforeAll(async () => {
    requireBuiltCli();
    dir = mkdtempSync(join(tmpdir(), 'cbw-'));
    lab = await createLoopLab('Local', PREFIX);
    for (const item of (clusterList('Local') as { items: { kind: string }[] }).items)
      api.apply(RESOURCE_OF[item.kind]!, item);
    await api.start();
    kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, api.kubeconfig());
    const port = await freePort();
    metricsUrl = `http://127.0.0.1:${port}/metrics`;
    const shipped = shippedAgent(
      [
        '--kubeconfig',
        kubeconfig,
        '--node-name',
        LAB.node1Name,
        '--netns',
        lab.node.name,
        '--interface',
        'eth0',
        '--listen',
        `127.0.0.1:${port}`,
        '--evidence-socket',
        join(dir, 'ev.sock'),
        '--capture',
        'ebpf',
      ],
      LAB.node1Name,
    );
    agent = spawn(shipped.node, shipped.argv, { env: shipped.env, stdio: ['ignore', 'ignore', 'pipe'] });
    agent.stderr!.on('data', (b: Buffer) => (stderr += b));
    await poll('/readyz', 20_000, async () =>
      (await fetch(metricsUrl.replace('/metrics', '/readyz'))).ok ? true : undefined,
    );
  }, 60_000);

  afterAll(async () => {
    agent?.kill('SIGKILL');
    await api.stop();
    lab?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('lists the Service from the API and counts its loop', async () => {
    const web = { namespace: 'lab', service: 'web', port: '80', protocol: 'TCP' };
    const s0 = await scrape();
    expect(find(s0, 'clbprobe_source_up', { source: 'cluster' })).toBe(1);
    // No loop yet: no series (idle), or 0 when a finding already gave the Service its series.
    expect(find(s0, 'clbprobe_lb_path_packets_total', { ...web, kind: 'loop_return' }) ?? 0).toBe(0);
    followedAtStart = find(s0, 'clbprobe_service_ports_followed', {})!;
    expect(followedAtStart).toBeGreaterThanOrEqual(1);
    expect(await lab.connect(2000)).toBe('timeout');
    const s1 = await poll('loop_return and the active L4-loop finding', 5000, async () => {
      const s = await scrape();
      const looped = (find(s, 'clbprobe_lb_path_packets_total', { ...web, kind: 'loop_return' }) ?? 0) > 0;
      return looped && find(s, 'clbprobe_findings_active', { ...web, mechanism: 'L4-loop', severity: 'active' }) === 1
        ? s
        : undefined;
    });
    expect(find(s1, 'clbprobe_conntrack_entries', { ...web, state: 'SYN_SENT' })).toBeGreaterThanOrEqual(1);
  });

  it('picks up a Service added later from the watch, without waiting for a resync', async () => {
    const list = clusterList('Cluster') as { items: { kind: string; metadata: { name: string }; status?: unknown }[] };
    const svc = list.items.find((i) => i.kind === 'Service')!;
    svc.metadata.name = 'web2';
    svc.status = { loadBalancer: { ingress: [{ ip: '10.0.100.102', ipMode: 'VIP' }] } };
    // A NodePort of its own, as the API server allocates them: one taken already is refused.
    (svc as unknown as { spec: { ports: { nodePort: number }[] } }).spec.ports[0]!.nodePort = LAB.nodePort + 1;
    const t0 = Date.now();
    api.apply('services', svc);
    await poll('lab/web2 followed', 5000, async () =>
      find(await scrape(), 'clbprobe_service_ports_followed', {}) === followedAtStart + 1 ? true : undefined,
    );
    // The resync interval is 60 s: seeing it this soon means the watch event did it.
    expect(Date.now() - t0).toBeLessThan(5000);
  });

  it('keeps its last view while the API is away (cluster source down) and recovers', async () => {
    await api.stop();
    const down = await poll('source_up{cluster} 0', 20_000, async () => {
      const s = await scrape();
      return find(s, 'clbprobe_source_up', { source: 'cluster' }) === 0 ? s : undefined;
    });
    // Still counting for the Services it knew: degraded, not stopped.
    expect(
      find(down, 'clbprobe_lb_path_packets_total', { namespace: 'lab', service: 'web', kind: 'loop_return' }),
    ).toBeGreaterThan(0);
    expect(find(down, 'clbprobe_source_up', { source: 'conntrack' })).toBe(1);
    await api.start();
    await poll('source_up{cluster} 1 again', 40_000, async () =>
      find(await scrape(), 'clbprobe_source_up', { source: 'cluster' }) === 1 ? true : undefined,
    );
    expect(stderr).toContain('cluster view is stale');
  }, 70_000);

  it('`diagnose --kubeconfig --netns` names the active loop from the same API', async () => {
    // Not spawnSync: the fake API server lives in this process and must keep answering.
    const p = spawn(
      process.execPath,
      [CLI, 'diagnose', '--kubeconfig', kubeconfig, '--netns', lab.node.name, '--node-name', LAB.node1Name, '--json'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    p.stdout!.on('data', (b: Buffer) => (out += b));
    p.stderr!.on('data', (b: Buffer) => (err += b));
    const code = await new Promise<number | null>((r) => p.once('close', r));
    expect(code, err).toBe(1);
    const json = JSON.parse(out) as { findings: { mechanism: string; severity: string; service: { name: string } }[] };
    expect(
      json.findings.filter((f) => f.severity === 'active').map((f) => `${f.service.name} ${f.mechanism}`),
    ).toContain('web L4-loop');
  }, 30_000);
});
