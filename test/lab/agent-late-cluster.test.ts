// The agent started while the API server is away: its first conntrack read finds no LB
// Service to keep entries for. When the cluster view arrives, the connections towards the
// new VIPs that already exist must be read then, not at the next periodic re-dump (10 min):
// events only tell of connections that change. The compiled agent, a node namespace holding
// an established entry towards the lab Service's LB VIP (conntrack -I), and the list/watch
// fake API server started only after the agent is ready. Namespaces are cbq-*.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterList, LAB } from '../../src/demo/lab.js';
import { Netns } from '../../src/demo/netns.js';
import { parseSamples, type Sample } from '../../src/export/parse-samples.js';
import { FakeApiServer, type ResourceName } from '../support/fake-apiserver.js';
import { isRoot } from '../support/netns.js';
import { shippedAgent } from '../support/shipped-agent.js';
import { freePort, until } from '../support/wait.js';

const RESOURCE_OF: Record<string, ResourceName> = {
  Service: 'services',
  EndpointSlice: 'endpointslices',
  Node: 'nodes',
};
const WEB = { namespace: 'lab', service: 'web', port: '80', protocol: 'TCP' };

const find = (s: Sample[], name: string, labels: Record<string, string>): number | undefined =>
  s.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))?.value;

describe.skipIf(!isRoot)('agent: a cluster view that arrives after the first conntrack read', () => {
  let node: Netns | undefined;
  let dir: string;
  let agent: ChildProcess | undefined;
  let stderr = '';
  let metricsUrl: string;
  let apiPort: number;
  const api = new FakeApiServer();

  const scrape = async (): Promise<Sample[]> => parseSamples(await (await fetch(metricsUrl)).text());

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'cbq-'));
    node = Netns.create('cbq-node');
    // A pod's connection to the LB VIP, established before the agent starts (it never changes again).
    node.sh(
      `conntrack -I -p tcp -s ${LAB.clientPod} -d ${LAB.vip} --sport 41000 --dport ${LAB.port} ` +
        `-r ${LAB.vip} -q ${LAB.clientPod} --reply-port-src ${LAB.port} --reply-port-dst 41000 --state ESTABLISHED -u ASSURED -t 3600`,
    );
    for (const item of (clusterList('Local') as { items: { kind: string }[] }).items)
      api.apply(RESOURCE_OF[item.kind]!, item);
    apiPort = await freePort();
    await api.start(apiPort);
    writeFileSync(join(dir, 'kubeconfig'), api.kubeconfig());
    await api.stop();
    const port = await freePort();
    metricsUrl = `http://127.0.0.1:${port}/metrics`;
    const shipped = shippedAgent(
      [
        '--kubeconfig',
        join(dir, 'kubeconfig'),
        '--node-name',
        LAB.node1Name,
        '--netns',
        node.name,
        '--capture',
        'off',
        '--listen',
        `127.0.0.1:${port}`,
        '--evidence-socket',
        join(dir, 'ev.sock'),
      ],
      LAB.node1Name,
    );
    agent = spawn(shipped.node, shipped.argv, { env: shipped.env, stdio: ['ignore', 'ignore', 'pipe'] });
    agent.stderr!.on('data', (b: Buffer) => (stderr += b));
    // The agent waits 10 s for a first list, then starts without a cluster.
    await until(
      '/readyz',
      40_000,
      async () =>
        (await fetch(metricsUrl.replace('/metrics', '/readyz')).catch(() => undefined))?.ok ? true : undefined,
      200,
    );
  }, 60_000);

  afterAll(async () => {
    agent?.kill('SIGKILL');
    await api.stop();
    node?.delete();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('reads the table again for the new VIPs, and keeps the connection that was already there', async () => {
    const before = await scrape();
    expect(find(before, 'clbprobe_source_up', { source: 'cluster' })).toBe(0);
    expect(find(before, 'clbprobe_conntrack_entries', { ...WEB, state: 'ESTABLISHED' })).toBeUndefined();
    expect(stderr).toMatch(/"services":0,"kept":0,"msg":"first sync done"/);
    const t0 = Date.now();
    await api.start(apiPort);
    const after = await until(
      'the established entry towards the VIP in clbprobe_conntrack_entries',
      40_000,
      async () => {
        const s = await scrape().catch(() => undefined);
        return s && find(s, 'clbprobe_conntrack_entries', { ...WEB, state: 'ESTABLISHED' }) === 1 ? s : undefined;
      },
      200,
    );
    expect(find(after, 'clbprobe_source_up', { source: 'cluster' })).toBe(1);
    expect(stderr).toContain('LB VIPs joined since the last conntrack read');
    // Well before the periodic re-dump (10 min by default).
    expect(Date.now() - t0).toBeLessThan(40_000);
  }, 60_000);
});
