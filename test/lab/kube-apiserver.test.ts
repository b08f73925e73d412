// The cluster watcher against a real kube-apiserver v1.20.2 (test/support/kube-control-plane.ts),
// with the identity the DaemonSet has: deploy/rbac.yaml applied as shipped, the agent's requests
// made with the ServiceAccount's user (a static token for system:serviceaccount:clbprobe:clbprobe).
// - the ClusterRole is enough (every list and watch the watcher makes is allowed) and least
//   privilege (everything else is refused by the real RBAC authorizer);
// - 1.20 serves EndpointSlices only as discovery.k8s.io/v1beta1: the watcher falls back, takes
//   locality from topology["kubernetes.io/hostname"], and says which API is missing;
// - `kubectl get ... -o json` from this server reads back through --cluster-file;
// - the API server stopped and started again (same etcd) while the watcher runs: down with the
//   reason while it is away, fresh again soon after, and what changed meanwhile is seen; a watch
//   from a resourceVersion older than the restarted server's watch cache gets the real 410
//   ("too old resource version") and the watcher lists once again instead of looping;
// - etcd compacted between two pages of a list: the real 410 on the continue token, and the list
//   starts over at once (no failure reported), as client-go's pager does.
// Everything listens on 127.0.0.1 only; the watcher reaches the API server through a TCP relay on
// loopback, so the test can keep it away while the server restarts and objects change.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadClusterFile } from '../../src/cluster/file.js';
import { type ApiError, KubeApi } from '../../src/cluster/kube-api.js';
import { loadApiTarget } from '../../src/cluster/kube-config.js';
import { Reflector } from '../../src/cluster/reflector.js';
import type { ClusterView } from '../../src/cluster/types.js';
import { ClusterWatch } from '../../src/cluster/watch.js';
import { clusterList, LAB } from '../../src/demo/lab.js';
import { type AuditEvent, type ControlPlane, startControlPlane } from '../support/kube-control-plane.js';
import { createList, createObject } from '../support/kube-objects.js';
import { isRoot } from '../support/netns.js';
import { type Relay, relay } from '../support/relay.js';
import { freePort, until } from '../support/wait.js';

const DEPLOY = join(import.meta.dirname, '../../deploy');
const NOTE = 'EndpointSlices: discovery.k8s.io/v1 not served (404), using v1beta1';

const web = (v: ClusterView | undefined) => v?.services.find((s) => s.namespace === 'lab' && s.name === 'web');

describe.skipIf(!isRoot)('cluster watch against a real kube-apiserver v1.20.2 with deploy/rbac.yaml', () => {
  let cp: ControlPlane;
  let dir: string;
  let watch: ClusterWatch | undefined;
  const views: ClusterView[] = [];
  let logText = '';
  /** The watcher's way to the API server: 127.0.0.1:relayPort -> the API server's port. */
  let relayPort: number;
  let apiRelay: Relay | undefined;
  const openRelay = async (): Promise<void> => {
    apiRelay = await relay(undefined, { port: relayPort }, { port: cp.port });
  };

  beforeAll(async () => {
    cp = await startControlPlane();
    dir = mkdtempSync(join(tmpdir(), 'cbk-'));
    // As shipped: the namespace, then the ServiceAccount, ClusterRole and binding in it.
    cp.kubectl(['apply', '-f', join(DEPLOY, 'namespace.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'rbac.yaml')]);
    await createList(cp, clusterList('Local') as { items: Record<string, unknown>[] });
    relayPort = await freePort();
    await openRelay();
  }, 180_000);

  afterAll(async () => {
    await watch?.stop();
    apiRelay?.close();
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
      const w = await cp.request(
        'GET',
        `${path}${path.includes('?') ? '&' : '?'}watch=1&timeoutSeconds=1`,
        undefined,
        'clbprobe',
      );
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
      [
        'POST',
        '/api/v1/namespaces/lab/services',
        { apiVersion: 'v1', kind: 'Service', metadata: { name: 'x' }, spec: { ports: [{ port: 1 }] } },
      ],
      ['DELETE', '/api/v1/namespaces/lab/services/web'],
      ['PATCH', '/api/v1/namespaces/lab/services/web', { metadata: { labels: { a: 'b' } } }],
      ['PATCH', '/api/v1/namespaces/lab/services/web/status', { status: {} }],
      ['DELETE', '/api/v1/nodes/node1'],
      ['PATCH', '/api/v1/nodes/node1', { metadata: { labels: { a: 'b' } } }],
      [
        'POST',
        '/apis/discovery.k8s.io/v1beta1/namespaces/lab/endpointslices',
        { metadata: { name: 'x' }, addressType: 'IPv4', endpoints: [] },
      ],
      ['DELETE', '/apis/networking.k8s.io/v1/namespaces/lab/ingresses/x'],
      ['GET', '/apis/rbac.authorization.k8s.io/v1/clusterroles'],
      [
        'POST',
        '/api/v1/namespaces/clbprobe/serviceaccounts/clbprobe/token',
        { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: {} },
      ],
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
    const kubeconfig = cp.kubeconfig('clbprobe', `https://127.0.0.1:${relayPort}`);
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
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error(`not synced in 30 s: ${watch!.status().reason}`)), 30_000),
      ),
    ]);
    expect(v.fresh).toBe(true);
    expect(watch.status()).toMatchObject({ source: 'cluster', available: true });
    expect(v.warnings).toEqual([NOTE]);
    expect(logText).toContain(NOTE);
    expect(v.node?.name).toBe(LAB.node1Name);
    const svc = web(v);
    expect(svc).toMatchObject({
      type: 'LoadBalancer',
      externalTrafficPolicy: 'Local',
      nodePort: LAB.nodePort,
      clusterIPs: [LAB.clusterIp],
    });
    // 1.20 has no ipMode: the address is a VIP, as kube-proxy 1.20 treats every LB IP.
    expect(svc?.lbIngress).toEqual([{ ip: LAB.vip, ipMode: 'VIP' }]);
    expect(svc?.endpoints).toEqual([
      expect.objectContaining({ address: LAB.serverPod, nodeName: LAB.node1Name, local: true, ready: true }),
    ]);
    expect(svc?.endpointPorts).toBe(LAB.serverPort);
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

  it('the API server restarts (same etcd): down with its reason while away, fresh soon after, changes made meanwhile seen, one relist after the 410', async () => {
    const w = watch!;
    // Where the watcher is now: the collection's resourceVersion as a list gives it.
    const before = (await cp.request('GET', '/api/v1/services')).body as { metadata: { resourceVersion: string } };
    const oldRv = before.metadata.resourceVersion;

    // 1. The server goes away: the view is kept, marked stale, with the reason.
    await cp.stopApiServer();
    const down = await until(
      'the cluster source down',
      20_000,
      () => (w.status().available ? undefined : w.status()),
      100,
    );
    expect(down.reason).toMatch(
      /^API unavailable, showing the last good view: .*(connection to the API server lost|ECONNREFUSED|ECONNRESET|socket hang up)/,
    );
    expect(web(w.view())?.externalTrafficPolicy).toBe('Local');

    // 2. While the watcher cannot reach it, the server comes back and the cluster changes; then the
    //    server restarts once more, so its new watch cache begins after those changes.
    apiRelay!.close();
    await cp.startApiServer();
    type Svc = {
      kind: string;
      metadata: { name: string };
      spec: { clusterIP?: string; clusterIPs?: string[]; ports: { nodePort?: number }[] };
      status?: unknown;
    };
    const svc = (clusterList('Cluster') as { items: Svc[] }).items.find((i) => i.kind === 'Service')!;
    svc.metadata.name = 'web2';
    // The API server allocates its own (web holds the lab's).
    delete svc.spec.clusterIP;
    delete svc.spec.clusterIPs;
    for (const p of svc.spec.ports) delete p.nodePort;
    svc.status = { loadBalancer: { ingress: [{ ip: '10.0.100.102' }] } };
    await createObject(cp, svc as unknown as Record<string, unknown>);
    const patched = await cp.request('PATCH', '/api/v1/namespaces/lab/services/web', {
      spec: { externalTrafficPolicy: 'Cluster' },
    });
    expect(patched.status).toBe(200);
    await cp.restartApiServer();
    // The restarted server answers a watch from the old version with the real 410 (as an ERROR event).
    const expired = await cp.request(
      'GET',
      `/api/v1/services?watch=1&timeoutSeconds=2&resourceVersion=${oldRv}`,
      undefined,
      'clbprobe',
    );
    // One event line: the answer parses as that one object.
    expect(expired.status).toBe(200);
    expect(expired.body).toMatchObject({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } });
    expect(w.status().available).toBe(false);

    // 3. The watcher may reach it again: fresh within its backoff (max 1 s here) plus a list.
    const auditFrom = cp.audit().length;
    const t0 = Date.now();
    await openRelay();
    const fresh = await until(
      'the cluster view fresh again, with the changes',
      30_000,
      () => {
        const v = w.view();
        return w.status().available &&
          v.services.some((s) => s.name === 'web2') &&
          web(v)?.externalTrafficPolicy === 'Cluster'
          ? v
          : undefined;
      },
      100,
    );
    const recoverMs = Date.now() - t0;
    expect(recoverMs).toBeLessThan(15_000);
    expect(fresh.fresh).toBe(true);
    expect(fresh.services.find((s) => s.name === 'web2')?.lbIngress).toEqual([{ ip: '10.0.100.102', ipMode: 'VIP' }]);

    // 4. One relist per collection after the 410, then watches from the new version; no loop.
    await new Promise((r) => setTimeout(r, 3000));
    const mine = (e: AuditEvent) => e.user.username === 'system:serviceaccount:clbprobe:clbprobe';
    const after = cp.audit().slice(auditFrom).filter(mine);
    const lists = after.filter((e) => e.verb === 'list').map((e) => e.requestURI.split('?')[0]);
    expect(lists.sort()).toEqual([
      '/api/v1/nodes',
      '/api/v1/services',
      '/apis/discovery.k8s.io/v1beta1/endpointslices',
      '/apis/networking.k8s.io/v1/ingresses',
    ]);
    // The completed watches are the ones that got the 410 (at most one per collection); the watches
    // from the new version are still open, so not yet in the log as complete.
    const watches = after.filter((e) => e.verb === 'watch');
    expect(watches.length).toBeLessThanOrEqual(4);
    console.log(
      `cluster view fresh ${recoverMs} ms after the API server became reachable; ${after.length} requests by the watcher since (${lists.length} lists, ${watches.length} watches)`,
    );
  }, 240_000);

  it('etcd compacted between two pages of a list: the real 410 on the continue token, the list starts over, once', async () => {
    // etcd's v3 JSON gateway (on 127.0.0.1): the current revision, and a compaction up to it.
    const etcd = async (path: string, body: unknown): Promise<{ header: { revision: string } }> => {
      const r = await fetch(`${cp.etcdUrl}/v3/${path}`, { method: 'POST', body: JSON.stringify(body) });
      if (!r.ok) throw new Error(`etcd ${path}: ${r.status} ${await r.text()}`);
      return (await r.json()) as { header: { revision: string } };
    };
    const compactNow = async (): Promise<void> => {
      // One write first, so the revision the first page was read at is older than the compaction.
      await cp.request('PATCH', '/api/v1/namespaces/lab/services/web', {
        metadata: { labels: { compacted: String(Date.now()) } },
      });
      const { header } = await etcd('kv/range', { key: Buffer.from('/').toString('base64') });
      await etcd('kv/compaction', { revision: header.revision, physical: true });
    };
    // The API as the watcher uses it, with etcd compacted right after the first page of the first list.
    const pages: string[] = [];
    class CompactingApi extends KubeApi {
      override async listPage(path: string, query: Record<string, string>, timeoutMs?: number) {
        const continued = query.continue !== undefined;
        const first = pages.length === 0;
        try {
          const page = await super.listPage(path, query, timeoutMs);
          pages.push(`${continued ? 'continue' : 'first'} 200`);
          if (first) await compactNow();
          return page;
        } catch (e) {
          pages.push(`${continued ? 'continue' : 'first'} ${(e as ApiError).statusCode} ${(e as Error).message}`);
          throw e;
        }
      }
    }
    const services = (await cp.request('GET', '/api/v1/services')).body as { items: unknown[] };
    expect(services.items.length).toBeGreaterThanOrEqual(2);
    let changes = 0;
    const r = new Reflector(new CompactingApi(loadApiTarget(cp.kubeconfig('clbprobe'))), {
      name: 'services',
      path: '/api/v1/services',
      pageSize: 1,
      watchTimeoutS: 60,
      backoffInitialMs: 100,
      backoffMaxMs: 1000,
      transform: (o) => o,
      onChange: () => changes++,
    });
    const reasonsSeen = new Set<string | undefined>();
    const running = r.run();
    try {
      await until(
        'listed',
        30_000,
        () => {
          reasonsSeen.add(r.health().reason);
          return r.health().synced ? true : undefined;
        },
        20,
      );
    } finally {
      r.stop();
      await running;
    }
    // Page 1, then the continue token from before the compaction: 410 Expired from the real server.
    expect(pages[0]).toBe('first 200');
    expect(pages[1]).toMatch(
      /^continue 410 GET \/api\/v1\/services: 410 Expired: The provided continue parameter is too old/,
    );
    // Then one whole list again, page by page, and no failure reported for it.
    expect(pages.slice(2)).toEqual(
      Array.from({ length: services.items.length }, (_, i) => (i === 0 ? 'first 200' : 'continue 200')),
    );
    expect(r.health()).toMatchObject({ synced: true, healthy: true });
    // No failure reported on the way: starting over is part of listing.
    expect([...reasonsSeen]).toEqual(['not listed yet', undefined]);
    expect([...r.store.values()].length).toBe(services.items.length);
  }, 60_000);
});
