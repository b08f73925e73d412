// Which pod answers for which node, and that the fan-out's defaults still
// match what deploy/ and the Dockerfile actually create.
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { AGENT_ENTRYPOINT, pcapFileFor, remoteCommand } from '../../../src/cli/evidence-remote.js';
import { AGENT_DEFAULTS } from '../../../src/cli/options.js';
import { KubeApi } from '../../../src/cluster/kube-api.js';
import { type AgentPod, planNodes, readAgentPods, sharedInFlight, toAgentPod } from '../../../src/remote/agent-pods.js';

const ROOT = join(import.meta.dirname, '../../..');

const p = (name: string, node: string, o: Partial<AgentPod> = {}): AgentPod => ({
  name,
  node,
  phase: 'Running',
  ready: true,
  containers: ['agent'],
  deleting: false,
  ip: '10.0.0.1',
  ...o,
});

describe('planNodes', () => {
  it('asks one Running pod per node, ready and not terminating first; reports nodes without one with the phase', () => {
    const plan = planNodes(
      [
        p('clbprobe-old', 'node-a', { deleting: true }),
        p('clbprobe-new', 'node-a'),
        p('clbprobe-b', 'node-b', { ready: false }),
        p('clbprobe-c', 'node-c', { phase: 'Pending', ready: false, waiting: 'ImagePullBackOff' }),
        p('clbprobe-u', '', { phase: 'Pending', ready: false }),
        p('clbprobe-d1', 'node-d', { phase: 'Failed', ready: false }),
        p('clbprobe-d2', 'node-d', { ready: false }),
      ],
      'agent',
    );
    expect(plan.ask.map((x) => `${x.node}/${x.name}`)).toEqual([
      'node-a/clbprobe-new',
      'node-b/clbprobe-b',
      'node-d/clbprobe-d2',
    ]);
    expect(plan.unreachable).toEqual([
      { node: '(unscheduled)', pod: 'clbprobe-u', reason: 'agent pod not running: phase Pending' },
      { node: 'node-c', pod: 'clbprobe-c', reason: 'agent pod not running: phase Pending, ImagePullBackOff' },
    ]);
  });

  it('--node keeps only those nodes and reports the ones with no agent pod', () => {
    const plan = planNodes([p('a', 'node-a'), p('b', 'node-b')], 'agent', ['node-b', 'node-z']);
    expect(plan.ask.map((x) => x.name)).toEqual(['b']);
    expect(plan.unreachable).toEqual([{ node: 'node-z', reason: 'no agent pod on this node' }]);
  });

  it('a pod without the agent container is not asked', () => {
    const plan = planNodes([p('a', 'node-a', { containers: ['clbprobe'] })], 'agent');
    expect(plan.ask).toEqual([]);
    expect(plan.unreachable[0]!.reason).toBe('pod has no container "agent" (it has clbprobe; --container)');
  });

  it('toAgentPod reads node, phase, readiness and the waiting reason of the agent container', () => {
    // A Pod as the API lists it, with fields the reader leaves.
    const listed = {
      metadata: { name: 'clbprobe-x', deletionTimestamp: new Date() },
      spec: { nodeName: 'n1', containers: [{ name: 'agent' }] },
      status: {
        phase: 'Running',
        containerStatuses: [
          {
            name: 'agent',
            ready: false,
            restartCount: 3,
            image: '',
            imageID: '',
            state: { waiting: { reason: 'CrashLoopBackOff' } },
          },
        ],
      },
    };
    const pod = toAgentPod(listed, 'agent');
    expect(pod).toEqual({
      name: 'clbprobe-x',
      node: 'n1',
      phase: 'Running',
      ready: false,
      waiting: 'CrashLoopBackOff',
      containers: ['agent'],
      deleting: true,
      ip: '',
    });
  });
});

describe('the fan-out matches the deployed agent', () => {
  it('default namespace, selector and container are those of deploy/', () => {
    const docs = (file: string) =>
      parseAllDocuments(readFileSync(join(ROOT, 'deploy', file), 'utf8')).map((d) => d.toJS());
    const ds = docs('daemonset.yaml').find((d) => d.kind === 'DaemonSet');
    const [key, value] = AGENT_DEFAULTS.selector.split('=');
    expect(ds.spec.template.metadata.labels[key!]).toBe(value);
    expect(ds.spec.template.spec.containers.map((c: { name: string }) => c.name)).toEqual([AGENT_DEFAULTS.container]);
    expect(parseAllDocuments(readFileSync(join(ROOT, 'deploy/kustomization.yaml'), 'utf8'))[0]!.toJS().namespace).toBe(
      AGENT_DEFAULTS.namespace,
    );
  });

  it('the command run in the pod is the image ENTRYPOINT + evidence --json', () => {
    const entrypoint = /^ENTRYPOINT\s+(\[.*\])\s*$/m.exec(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'))![1]!;
    expect(JSON.parse(entrypoint)).toEqual([...AGENT_ENTRYPOINT]);
    expect(remoteCommand({ service: 'shop/web', port: 443, watchS: 30 })).toEqual([
      ...AGENT_ENTRYPOINT,
      'evidence',
      '--service',
      'shop/web',
      '--json',
      '--port',
      '443',
      '--watch',
      '30s',
    ]);
    expect(remoteCommand({ service: 'shop/web', watchS: 0 })).toEqual([
      ...AGENT_ENTRYPOINT,
      'evidence',
      '--service',
      'shop/web',
      '--json',
    ]);
    expect(remoteCommand({ service: 'shop/web', watchS: 30, pcapMaxMiB: 100 }, '/tmp/x.pcap').slice(-6)).toEqual([
      '--watch',
      '30s',
      '--pcap',
      '/tmp/x.pcap',
      '--pcap-max',
      '100',
    ]);
  });

  it('a node capture goes to the given file with the node name inserted', () => {
    expect(pcapFileFor('/tmp/web.pcap', 'node-1')).toBe('/tmp/web.node-1.pcap');
    expect(pcapFileFor('cap', 'node-1')).toBe('cap.node-1');
  });
});

describe('reading the agent pods', () => {
  const servers: Server[] = [];
  afterEach(async () => {
    for (const s of servers.splice(0)) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
  });

  /** A loopback API server answering every GET with `body`; counts the GETs. */
  async function apiServing(body: string): Promise<{ api: KubeApi; gets: () => number }> {
    let gets = 0;
    const s = createServer((_req, res) => {
      gets++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
    });
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const server = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
    // A whole-body bound below the list's size: only a listing that streams each pod through the shape reads it.
    const api = new KubeApi({ server, source: 'test', requestOptions: async () => ({}) }, { maxBodyBytes: 64 << 10 });
    return { api, gets: () => gets };
  }

  /** A pod of deploy/daemonset.yaml's template as the API lists it, with status and managedFields. */
  const daemonSetPod = (template: { metadata: object; spec: { containers: { name: string }[] } }, i: number) => ({
    metadata: {
      ...template.metadata,
      name: `clbprobe-${i}`,
      namespace: 'clbprobe',
      managedFields: [{ manager: 'kubelet', fieldsV1: { f: 'x'.repeat(2000) } }],
      ...(i === 3 ? { deletionTimestamp: '2026-11-01T00:00:00Z' } : {}),
    },
    spec: { ...template.spec, nodeName: `node-${i}` },
    status: {
      phase: i === 2 ? 'Pending' : 'Running',
      podIP: `10.0.0.${i}`,
      conditions: [{ type: 'Ready', status: 'True' }],
      containerStatuses: template.spec.containers.map((c) => ({
        name: c.name,
        ready: i !== 2,
        image: 'clbprobe:x',
        state: i === 2 ? { waiting: { reason: 'ImagePullBackOff', message: 'y'.repeat(500) } } : { running: {} },
      })),
    },
  });

  it('keeps what toAgentPod reads of each listed pod, past a whole-body bound the list is over', async () => {
    const docs = parseAllDocuments(readFileSync(join(ROOT, 'deploy/daemonset.yaml'), 'utf8')).map((d) => d.toJS());
    const template = docs.find((d) => d.kind === 'DaemonSet').spec.template;
    const items = Array.from({ length: 50 }, (_, i) => daemonSetPod(template, i));
    const body = JSON.stringify({ kind: 'PodList', metadata: { resourceVersion: '7' }, items });
    expect(body.length).toBeGreaterThan(64 << 10);
    const { api } = await apiServing(body);
    const pods = await readAgentPods(api, 'clbprobe', AGENT_DEFAULTS.selector, AGENT_DEFAULTS.container);
    expect(pods).toEqual(items.map((p) => toAgentPod(p, AGENT_DEFAULTS.container)));
    expect(pods[2]).toMatchObject({ phase: 'Pending', ready: false, waiting: 'ImagePullBackOff' });
    expect(pods[3]).toMatchObject({ deleting: true, ready: true, node: 'node-3', ip: '10.0.0.3' });
  });

  it('a pod whose read fields are past the caps is named unreachable with why, not asked', async () => {
    const fat = { metadata: { name: 'clbprobe-fat' }, spec: { nodeName: `n-${'x'.repeat(20 << 10)}` } };
    const { api } = await apiServing(JSON.stringify({ metadata: { resourceVersion: '1' }, items: [fat] }));
    const plan = planNodes(await readAgentPods(api, 'clbprobe', 'a=b', 'agent'), 'agent');
    expect(plan.ask).toEqual([]);
    expect(plan.unreachable).toEqual([
      {
        node: '(unscheduled)',
        pod: 'clbprobe-fat',
        reason: expect.stringMatching(/^agent pod not running: phase Unknown, not read: /),
      },
    ]);
  });

  it('concurrent callers share one listing; the next caller after it ends lists again', async () => {
    const { api, gets } = await apiServing(JSON.stringify({ metadata: { resourceVersion: '1' }, items: [] }));
    const listPods = sharedInFlight(() => readAgentPods(api, 'clbprobe', 'a=b', 'agent'));
    const answers = await Promise.all(Array.from({ length: 5 }, () => listPods()));
    expect(new Set(answers).size).toBe(1);
    expect(gets()).toBe(1);
    await listPods();
    expect(gets()).toBe(2);
  });

  it('a failed shared listing fails every caller that shared it, and is tried again by the next', async () => {
    let reads = 0;
    const listPods = sharedInFlight(async () => {
      reads++;
      if (reads === 1) throw new Error('503');
      return reads;
    });
    const first = await Promise.allSettled([listPods(), listPods()]);
    expect(first.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(await listPods()).toBe(2);
  });
});
