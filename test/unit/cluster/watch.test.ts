// The watcher against a real HTTP server speaking list/watch JSON (test/support/fake-apiserver.ts).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadClusterFile } from '../../../src/cluster/file.js';
import { backoff } from '../../../src/cluster/reflector.js';
import type { ClusterView } from '../../../src/cluster/types.js';
import { ClusterWatch } from '../../../src/cluster/watch.js';
import { FakeApiServer, type ResourceName } from '../../support/fake-apiserver.js';

const FIX = new URL('../../fixtures/cluster/', import.meta.url).pathname;
const BUCKET: Record<string, ResourceName> = {
  Service: 'services',
  EndpointSlice: 'endpointslices',
  Ingress: 'ingresses',
  Node: 'nodes',
};
const fixtureItems = (
  JSON.parse(readFileSync(`${FIX}kubectl-list.json`, 'utf8')) as {
    items: { kind: string; metadata: { name: string; namespace?: string } }[];
  }
).items;

const tmp = mkdtempSync(join(tmpdir(), 'clbprobe-watch-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** A fake API server loaded with the fixture cluster, a kubeconfig for it, and a watcher that records its views. */
async function setup(
  opts: {
    forbidIngresses?: boolean;
    items?: typeof fixtureItems;
    endpointSliceVersion?: FakeApiServer['endpointSliceVersion'];
  } = {},
) {
  const api = new FakeApiServer();
  api.endpointSliceVersion = opts.endpointSliceVersion ?? 'v1';
  for (const item of opts.items ?? fixtureItems) api.apply(BUCKET[item.kind]!, structuredClone(item));
  if (opts.forbidIngresses) api.forbid('ingresses');
  await api.start();
  const kubeconfig = join(tmp, `kubeconfig-${Math.random().toString(36).slice(2)}`);
  writeFileSync(kubeconfig, api.kubeconfig());
  const views: ClusterView[] = [];
  const listeners: (() => void)[] = [];
  const watch = new ClusterWatch({
    nodeName: 'node-a',
    kubeconfig,
    debounceMs: 30,
    backoffInitialMs: 40,
    backoffMaxMs: 250,
    watchTimeoutS: 30,
    // Small pages, so that the list follows `continue` tokens.
    pageSize: 2,
    onChange: (v) => {
      views.push(v);
      for (const l of listeners) l();
    },
  });
  /** Resolves with the first emitted view (from now on) that satisfies `pred`. */
  const next = (pred: (v: ClusterView) => boolean, what: string, timeoutMs = 5000): Promise<ClusterView> => {
    const from = views.length;
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const hit = views.slice(from).find(pred);
        if (!hit) return;
        clearTimeout(timer);
        listeners.splice(listeners.indexOf(check), 1);
        resolve(hit);
      };
      const timer = setTimeout(
        () =>
          reject(
            new Error(`no view with ${what} in ${timeoutMs} ms; last: ${JSON.stringify(views.at(-1)?.staleReason)}`),
          ),
        timeoutMs,
      );
      listeners.push(check);
    });
  };
  cleanups.push(async () => {
    await watch.stop();
    await api.stop();
  });
  return { api, watch, views, next };
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

const web = (v: ClusterView) => v.services.find((s) => s.name === 'web' && s.portName === 'http');

describe('ClusterWatch against a fake API server', () => {
  let fromFile: ClusterView;
  beforeAll(() => {
    fromFile = loadClusterFile(`${FIX}kubectl-list.json`, { nodeName: 'node-a' });
  });

  it('initial sync gives the same view as the same objects read from a file', async () => {
    const { api, watch } = await setup();
    watch.start();
    const v = await watch.synced();
    expect(v.fresh).toBe(true);
    expect(v.warnings).toEqual([]);
    expect(v.services).toEqual(fromFile.services);
    expect(v.node).toEqual(fromFile.node);
    expect(watch.status()).toMatchObject({ source: 'cluster', available: true });
    // Paged lists, and only this node asked for.
    const lists = api.requests.filter((r) => !r.watch);
    expect(lists.filter((r) => r.resource === 'services').map((r) => r.query.continue !== undefined)).toEqual([
      false,
      true,
      true,
      true,
    ]);
    expect(lists.find((r) => r.resource === 'nodes')?.query.fieldSelector).toBe('metadata.name=node-a');
  });

  it('objects the builder warns about: the same Services and warnings as from a file (each object parsed once, on arrival)', async () => {
    // The malformed fixture, minus what the API server itself would refuse (no name, another
    // kind or apiVersion): bad ports, a bad Service type, bad endpoints, a bad Ingress, a bad Node.
    const all = (
      JSON.parse(readFileSync(`${FIX}malformed-objects.json`, 'utf8')) as {
        items: ((typeof fixtureItems)[number] & { apiVersion: string })[];
      }
    ).items;
    const items = all.filter((i) => BUCKET[i.kind] && i.metadata?.name && i.apiVersion !== 'networking.k8s.io/v1beta1');
    expect(items.length).toBeGreaterThanOrEqual(6);
    const file = join(tmp, 'malformed-served.json');
    writeFileSync(file, JSON.stringify({ apiVersion: 'v1', kind: 'List', items }));
    const fromFile = loadClusterFile(file, { nodeName: 'node-a' });
    expect(fromFile.warnings.length).toBeGreaterThan(5);

    const { watch } = await setup({ items });
    watch.start();
    const v = await watch.synced();
    expect(v.services).toEqual(fromFile.services);
    expect(v.node).toEqual(fromFile.node);
    // A file names an object by its place in the list, the watch by its collection.
    const collection: Record<string, string> = {
      Service: 'services',
      EndpointSlice: 'endpointslices',
      Ingress: 'ingresses',
      Node: 'node',
    };
    const renamed = fromFile.warnings.map((w) =>
      w.replace(/^items\[\d+\] \((\w+)/, (_, kind: string) => `${collection[kind]} (${kind}`),
    );
    expect([...v.warnings].sort()).toEqual(renamed.sort());
  });

  it('live updates: a changed Service and a deleted EndpointSlice; bursts are debounced', async () => {
    const { api, watch, next, views } = await setup();
    watch.start();
    await watch.synced();
    const svc = structuredClone(fixtureItems.find((i) => i.kind === 'Service' && i.metadata.name === 'web')!) as Record<
      string,
      any
    >;
    svc.metadata.annotations['service.cloud.tencent.com/prevent-loopback'] = 'true';
    api.apply('services', svc);
    const v1 = await next((v) => web(v)?.annotations.tencentPreventLoopback === true, 'prevent-loopback on web');
    expect(v1.fresh).toBe(true);
    // A burst of 50 updates (a rollout) is emitted as a few views, the last one complete.
    const before = views.length;
    for (let i = 0; i < 50; i++) {
      svc.metadata.annotations['example.com/rev'] = String(i);
      api.apply('services', svc);
    }
    await waitFor(
      () => views.at(-1)?.services.length === fromFile.services.length && views.length > before,
      'a view after the burst',
    );
    await new Promise((r) => setTimeout(r, 100));
    expect(views.length - before).toBeLessThanOrEqual(3);
    api.delete('endpointslices', 'default', 'web-9f2bd');
    const v2 = await next((v) => web(v)?.endpoints.length === 0, 'web without endpoints');
    expect(v2.services).toHaveLength(fromFile.services.length);
  });

  it('API down: keeps the last view, flagged stale; API back: fresh again, with what changed meanwhile', async () => {
    const { api, watch, next } = await setup();
    watch.start();
    await watch.synced();
    await api.stop();
    const stale = await next((v) => !v.fresh, 'fresh:false');
    expect(stale.services).toEqual(fromFile.services);
    expect(stale.staleReason).toMatch(
      /^API unavailable, showing the last good view: \w+: watch \S+: (connection to the API server lost|connect ECONNREFUSED)/,
    );
    expect(stale.syncedAt).toBeDefined();
    // Retries keep failing; the status carries the latest reason.
    await waitFor(() => /ECONNREFUSED/.test(watch.status().reason ?? ''), 'ECONNREFUSED in status');
    expect(watch.status()).toMatchObject({ source: 'cluster', available: false });

    // Changes while the client is away arrive with the resumed watch (no relist needed).
    api.delete('services', 'default', 'proxied');
    const listsBefore = api.requests.filter((r) => !r.watch).length;
    await api.start();
    const back = await next((v) => v.fresh && !v.services.some((s) => s.name === 'proxied'), 'fresh without proxied');
    expect(back.staleReason).toBeUndefined();
    expect(Date.parse(back.syncedAt!)).toBeGreaterThan(Date.parse(stale.syncedAt!));
    expect(api.requests.filter((r) => !r.watch).length).toBe(listsBefore);
    expect(watch.status().available).toBe(true);
  });

  it('410 Gone on resume: relists and catches up', async () => {
    const { api, watch, next } = await setup();
    watch.start();
    await watch.synced();
    const listsBefore = api.requests.filter((r) => !r.watch && r.resource === 'services').length;
    await api.stop();
    await next((v) => !v.fresh, 'fresh:false');
    // History the client needs is compacted away while it is disconnected.
    api.delete('services', 'default', 'api');
    api.compact();
    await api.start();
    const v = await next((x) => x.fresh && !x.services.some((s) => s.name === 'api'), 'fresh without api');
    expect(v.services).toHaveLength(fromFile.services.length - 1);
    expect(api.requests.filter((r) => !r.watch && r.resource === 'services').length).toBeGreaterThan(listsBefore);
    // The client first tried to resume and was told 410 by an ERROR event in the stream.
    expect(api.expiredWatches).toBeGreaterThanOrEqual(4);
  });

  it('a normal end of the watch (server timeout) is resumed without a relist; bookmarks move the version', async () => {
    const { api, watch, next } = await setup();
    watch.start();
    await watch.synced();
    const lists = api.requests.filter((r) => !r.watch).length;
    api.apply('nodes', { metadata: { name: 'node-c' }, spec: { podCIDRs: ['10.244.3.0/24'] } }); // other node: filtered out
    const bookmarkRv = api.currentResourceVersion();
    api.bookmark();
    api.endWatches();
    await waitFor(() => api.watcherCount() === 4, 'four watches again');
    const node = structuredClone(
      fixtureItems.find((i) => i.kind === 'Node' && i.metadata.name === 'node-a')!,
    ) as Record<string, any>;
    node.spec.podCIDRs = ['10.244.9.0/24'];
    api.apply('nodes', node);
    const v = await next((x) => x.node?.podCIDRs[0] === '10.244.9.0/24', 'new pod CIDR');
    expect(v.fresh).toBe(true);
    expect(api.requests.filter((r) => !r.watch).length).toBe(lists);
    const resumed = api.requests.filter((r) => r.watch && r.resource === 'nodes').at(-1)!;
    expect(resumed.query).toMatchObject({ fieldSelector: 'metadata.name=node-a', allowWatchBookmarks: 'true' });
    // Resumed from the bookmark's version, past the node-c event it never saw.
    expect(resumed.query.resourceVersion).toBe(bookmarkRv);
  });

  it('Ingresses forbidden by RBAC: the view still syncs, says so, and has no Ingress VIPs', async () => {
    const { watch } = await setup({ forbidIngresses: true });
    watch.start();
    const v = await watch.synced();
    expect(v.fresh).toBe(true);
    expect(web(v)?.ingressVips).toEqual([]);
    expect(v.warnings).toEqual([
      expect.stringMatching(
        /^ingresses not readable \(GET \/apis\/networking\.k8s\.io\/v1\/ingresses: 403 Forbidden: .*\); treated as empty$/,
      ),
    ]);
  });

  it('API unreachable from the start: no view, status says why', async () => {
    const api = new FakeApiServer();
    await api.start();
    const kubeconfig = join(tmp, 'kubeconfig-down');
    writeFileSync(kubeconfig, api.kubeconfig());
    await api.stop();
    const watch = new ClusterWatch({ nodeName: 'node-a', kubeconfig, backoffInitialMs: 20, backoffMaxMs: 50 });
    cleanups.push(() => watch.stop());
    watch.start();
    await waitFor(() => /ECONNREFUSED/.test(watch.status().reason ?? ''), 'ECONNREFUSED in status');
    expect(watch.status()).toMatchObject({ available: false, reason: expect.stringMatching(/^not synced yet: /) });
    expect(watch.view()).toMatchObject({ fresh: false, services: [] });
  });

  it('without a kubeconfig outside a pod, says what to pass', () => {
    const saved = process.env.KUBERNETES_SERVICE_HOST;
    delete process.env.KUBERNETES_SERVICE_HOST;
    try {
      expect(() => new ClusterWatch({ nodeName: 'n' })).toThrow(/pass --kubeconfig FILE, or --cluster-file FILE/);
    } finally {
      if (saved !== undefined) process.env.KUBERNETES_SERVICE_HOST = saved;
    }
  });
});

/** An EndpointSlice as a 1.20 API server serves it: discovery.k8s.io/v1beta1, the node in topology. */
function asV1beta1(item: (typeof fixtureItems)[number]): (typeof fixtureItems)[number] {
  const s = structuredClone(item) as unknown as { apiVersion: string; endpoints?: Record<string, unknown>[] };
  s.apiVersion = 'discovery.k8s.io/v1beta1';
  for (const ep of s.endpoints ?? []) {
    if (typeof ep.nodeName === 'string') ep.topology = { 'kubernetes.io/hostname': ep.nodeName };
    delete ep.nodeName;
  }
  return s as unknown as (typeof fixtureItems)[number];
}

describe('ClusterWatch and EndpointSlice API versions', () => {
  it('1.17-1.20 (v1 not served): lists and watches v1beta1, locality from topology, and says so', async () => {
    const items = fixtureItems.map((i) => (i.kind === 'EndpointSlice' ? asV1beta1(i) : i));
    expect(JSON.stringify(items)).toContain('"topology"');
    const { api, watch, next } = await setup({ items, endpointSliceVersion: 'v1beta1' });
    watch.start();
    const v = await watch.synced();
    const fromFile = loadClusterFile(`${FIX}kubectl-list.json`, { nodeName: 'node-a' });
    expect(v.services).toEqual(fromFile.services);
    expect(web(v)?.endpoints.some((e) => e.local)).toBe(true);
    expect(v.warnings).toEqual(['EndpointSlices: discovery.k8s.io/v1 not served (404), using v1beta1']);
    expect(watch.status()).toMatchObject({ source: 'cluster', available: true });
    // The watch is on v1beta1 too: a deletion arrives.
    api.delete('endpointslices', 'default', 'web-9f2bd');
    await next((x) => web(x)?.endpoints.length === 0, 'web without endpoints');
  });

  it('neither v1 nor v1beta1 served: not synced, and the reason names the missing API', async () => {
    const { watch } = await setup({ endpointSliceVersion: 'none' });
    watch.start();
    await waitFor(
      () => /neither discovery\.k8s\.io\/v1 nor v1beta1 served \(404\)/.test(watch.status().reason ?? ''),
      'the reason',
    );
    expect(watch.status()).toMatchObject({ available: false });
    expect(watch.status().reason).toMatch(/^not synced yet: EndpointSlices: neither/);
  });
});

describe('backoff', () => {
  it('doubles from the initial delay up to the maximum, jittered within [base/2, base]', () => {
    for (let i = 0; i < 200; i++) {
      const d0 = backoff(0, 500, 30_000);
      expect(d0).toBeGreaterThanOrEqual(250);
      expect(d0).toBeLessThanOrEqual(500);
      const d3 = backoff(3, 500, 30_000);
      expect(d3).toBeGreaterThanOrEqual(2000);
      expect(d3).toBeLessThanOrEqual(4000);
      const dMax = backoff(100, 500, 30_000);
      expect(dMax).toBeGreaterThanOrEqual(15_000);
      expect(dMax).toBeLessThanOrEqual(30_000);
    }
    // Jitter: not all the same.
    expect(new Set(Array.from({ length: 20 }, () => backoff(2, 500, 30_000))).size).toBeGreaterThan(1);
  });
});

async function waitFor(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
