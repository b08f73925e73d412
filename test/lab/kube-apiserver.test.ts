// The cluster watcher against a real kube-apiserver v1.20.2 (test/support/kube-control-plane.ts),
// with the identity the DaemonSet has: deploy/rbac.yaml applied as shipped, the agent's requests
// made with the ServiceAccount's user (a static token for system:serviceaccount:clbprobe:clbprobe).
// - the ClusterRole is enough (every list and watch the watcher makes is allowed) and least
//   privilege (everything else is refused by the real RBAC authorizer);
// - 1.20 serves EndpointSlices only as discovery.k8s.io/v1beta1: the watcher falls back, takes
//   locality from topology["kubernetes.io/hostname"], and says which API is missing;
// - `kubectl get ... -o json` from this server reads back through --cluster-file.
// Everything listens on 127.0.0.1 only.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadClusterFile } from '../../src/cluster/file.js';
import type { ClusterView } from '../../src/cluster/types.js';
import { ClusterWatch } from '../../src/cluster/watch.js';
import { LAB, clusterList } from '../../src/demo/lab.js';
import { startControlPlane, type ControlPlane } from '../support/kube-control-plane.js';
import { createList } from '../support/kube-objects.js';
import { isRoot } from '../support/netns.js';

const DEPLOY = join(import.meta.dirname, '../../deploy');
const NOTE = 'EndpointSlices: discovery.k8s.io/v1 not served (404), using v1beta1';

const web = (v: ClusterView | undefined) => v?.services.find((s) => s.namespace === 'lab' && s.name === 'web');

describe.skipIf(!isRoot)('cluster watch against a real kube-apiserver v1.20.2 with deploy/rbac.yaml', () => {
  let cp: ControlPlane;
  let dir: string;
  let watch: ClusterWatch | undefined;
  const views: ClusterView[] = [];
  let logText = '';

  beforeAll(async () => {
    cp = await startControlPlane();
    dir = mkdtempSync(join(tmpdir(), 'cbk-'));
    // As shipped: the namespace, then the ServiceAccount, ClusterRole and binding in it.
    cp.kubectl(['apply', '-f', join(DEPLOY, 'namespace.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'rbac.yaml')]);
    await createList(cp, clusterList('Local') as { items: Record<string, unknown>[] });
  }, 180_000);

  afterAll(async () => {
    await watch?.stop();
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the ServiceAccount may list and watch what the agent reads, and nothing else', async () => {
    const allowed = [
      '/api/v1/services',
      '/api/v1/nodes',
      '/api/v1/nodes?fieldSelector=metadata.name%3Dnode1',
      '/apis/discovery.k8s.io/v1beta1/endpointslices',
      '/apis/networking.k8s.io/v1/ingresses',
      '/api/v1/namespaces/lab/services/web',
    ];
    for (const path of allowed) {
      const list = await cp.request('GET', path, undefined, 'clbprobe');
      expect(list.status, `GET ${path}`).toBe(200);
    }
    for (const path of allowed.slice(0, 5)) {
      const w = await cp.request('GET', `${path}${path.includes('?') ? '&' : '?'}watch=1&timeoutSeconds=1`, undefined, 'clbprobe');
      expect(w.status, `watch ${path}`).toBe(200);
    }
    const refused: [string, string, unknown?][] = [
      ['GET', '/api/v1/secrets'],
      ['GET', '/api/v1/namespaces/clbprobe/secrets'],
      ['GET', '/api/v1/pods'],
      ['GET', '/api/v1/configmaps'],
      ['GET', '/api/v1/endpoints'],
      ['GET', '/api/v1/namespaces'],
      ['GET', '/api/v1/namespaces/lab/pods/web-0/exec?command=true'],
      ['POST', '/api/v1/namespaces/lab/services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'x' }, spec: { ports: [{ port: 1 }] } }],
      ['DELETE', '/api/v1/namespaces/lab/services/web'],
      ['PATCH', '/api/v1/namespaces/lab/services/web', { metadata: { labels: { a: 'b' } } }],
      ['PATCH', '/api/v1/namespaces/lab/services/web/status', { status: {} }],
      ['DELETE', '/api/v1/nodes/node1'],
      ['PATCH', '/api/v1/nodes/node1', { metadata: { labels: { a: 'b' } } }],
      ['POST', '/apis/discovery.k8s.io/v1beta1/namespaces/lab/endpointslices', { metadata: { name: 'x' }, addressType: 'IPv4', endpoints: [] }],
      ['DELETE', '/apis/networking.k8s.io/v1/namespaces/lab/ingresses/x'],
      ['GET', '/apis/rbac.authorization.k8s.io/v1/clusterroles'],
      ['POST', '/api/v1/namespaces/clbprobe/serviceaccounts/clbprobe/token', { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: {} }],
    ];
    for (const [method, path, body] of refused) {
      const r = await cp.request(method, path, body, 'clbprobe');
      expect(r.status, `${method} ${path}: ${JSON.stringify(r.body).slice(0, 200)}`).toBe(403);
      expect((r.body as { message?: string }).message).toContain('system:serviceaccount:clbprobe:clbprobe');
    }
    // The binding is what grants it: an authenticated user without one is refused the same lists.
    expect((await cp.request('GET', '/api/v1/services', undefined, 'nobody')).status).toBe(403);
  });

  it('lists and watches with the ServiceAccount: v1beta1 EndpointSlices, locality from topology, the missing API named', async () => {
    const lines = new Writable({
      write(chunk: Buffer, _e, cb) {
        logText += chunk.toString();
        cb();
      },
    });
    const kubeconfig = cp.kubeconfig('clbprobe');
    watch = new ClusterWatch({
      nodeName: LAB.node1Name,
      kubeconfig,
      debounceMs: 50,
      backoffInitialMs: 100,
      backoffMaxMs: 1000,
      log: pino({ level: 'info' }, lines),
      onChange: (v) => views.push(v),
    });
    watch.start();
    const v = await Promise.race([
      watch.synced(),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`not synced in 30 s: ${watch!.status().reason}`)), 30_000)),
    ]);
    expect(v.fresh).toBe(true);
    expect(watch.status()).toMatchObject({ source: 'cluster', available: true });
    expect(v.warnings).toEqual([NOTE]);
    expect(logText).toContain(NOTE);
    expect(v.node?.name).toBe(LAB.node1Name);
    const svc = web(v);
    expect(svc).toMatchObject({ type: 'LoadBalancer', externalTrafficPolicy: 'Local', nodePort: LAB.nodePort, clusterIPs: [LAB.clusterIp] });
    // 1.20 has no ipMode: the address is a VIP, as kube-proxy 1.20 treats every LB IP.
    expect(svc?.lbIngress).toEqual([{ ip: LAB.vip, ipMode: 'VIP' }]);
    expect(svc?.endpoints).toEqual([expect.objectContaining({ address: LAB.serverPod, nodeName: LAB.node1Name, local: true, ready: true, port: LAB.serverPort })]);
  });

  it('`kubectl get -o json` from this server (v1beta1 slices) reads back through --cluster-file with the same Services', async () => {
    const json = cp.kubectl(['get', 'services,endpointslices,ingresses,nodes', '-A', '-o', 'json']);
    expect(json).toContain('"apiVersion": "discovery.k8s.io/v1beta1"');
    const file = join(dir, 'cluster.json');
    writeFileSync(file, json);
    const fromFile = loadClusterFile(file, { nodeName: LAB.node1Name });
    expect(fromFile.warnings).toEqual([]);
    expect(web(fromFile)).toEqual(web(watch!.view()));
    expect(JSON.parse(readFileSync(file, 'utf8')).items.length).toBeGreaterThanOrEqual(4);
  });
});
