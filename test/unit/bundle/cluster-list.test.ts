// cluster.json from the API for `collect --kubeconfig`: paged lists from the
// fake API server, written as a v1 List, read back as the cluster file.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listClusterObjects } from '../../../src/bundle/cluster-list.js';
import { loadClusterFile } from '../../../src/cluster/file.js';
import { ApiError, KubeApi } from '../../../src/cluster/kube-api.js';
import { loadApiTarget } from '../../../src/cluster/kube-config.js';
import { GATEWAY_KINDS } from '../../../src/cluster/objects.js';
import { FakeApiServer, type ResourceName } from '../../support/fake-apiserver.js';

const CLUSTER = join(import.meta.dirname, '../../fixtures/bundles/tke-ipvs-unbound-l4-loop/cluster.json');
const RESOURCE: Record<string, ResourceName> = {
  Service: 'services',
  EndpointSlice: 'endpointslices',
  Ingress: 'ingresses',
  Node: 'nodes',
};

describe('listClusterObjects', () => {
  const server = new FakeApiServer();
  let tmp: string;
  let api: KubeApi;
  beforeAll(async () => {
    await server.start();
    const items = (JSON.parse(readFileSync(CLUSTER, 'utf8')) as { items: { kind: string }[] }).items;
    for (const { kind, ...rest } of items) server.apply(RESOURCE[kind]!, rest);
    tmp = mkdtempSync(join(tmpdir(), 'cbb-kube-'));
    writeFileSync(join(tmp, 'kubeconfig'), server.kubeconfig());
    api = new KubeApi(loadApiTarget(join(tmp, 'kubeconfig')));
  });
  afterAll(async () => {
    await server.stop();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('lists every kind over several pages into a List that the cluster file reader gives the same view of', async () => {
    const { list, errors } = await listClusterObjects(api, 1);
    expect(errors).toEqual([]);
    expect(list.items.map((i) => (i as { kind: string }).kind).sort()).toEqual([
      'EndpointSlice',
      'EndpointSlice',
      'Node',
      'Service',
      'Service',
    ]);
    writeFileSync(join(tmp, 'cluster.json'), JSON.stringify(list));
    const fromApi = loadClusterFile(join(tmp, 'cluster.json'), { nodeName: 'node-a' });
    const fromFile = loadClusterFile(CLUSTER, { nodeName: 'node-a' });
    expect(fromApi.warnings).toEqual([]);
    expect(fromApi.services).toEqual(fromFile.services);
    expect(fromApi.node).toEqual(fromFile.node);
  });

  it('keeps the other kinds when one cannot be listed (RBAC), naming it', async () => {
    server.forbid('ingresses');
    try {
      // An optional kind not readable is treated as empty, as the agent does: said, but the list is whole.
      const { list, errors, notes } = await listClusterObjects(api);
      expect(errors).toEqual([]);
      expect(notes).toHaveLength(1);
      expect(notes[0]).toMatch(/^Ingress list: GET \/apis\/networking.k8s.io\/v1\/ingresses: .*403/);
      expect(list.items.length).toBe(5);
    } finally {
      server.forbid('ingresses', false);
    }
    server.forbid('endpointslices');
    try {
      const { errors } = await listClusterObjects(api);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(/^EndpointSlice list: .*403/);
    } finally {
      server.forbid('endpointslices', false);
    }
  });
});

describe('listClusterObjects and API versions', () => {
  it('lists a kind at the next version the cluster serves (GRPCRoute v1alpha2 on Gateway API v1.0)', async () => {
    const route = { metadata: { name: 'r', namespace: 'shop' }, spec: { parentRefs: [{ name: 'gw' }] } };
    const api = {
      serves: async () => true,
      async listPage(path: string) {
        if (path.endsWith('/v1/grpcroutes')) throw new ApiError(`GET ${path}: 404 NotFound`, 404);
        const items = path.endsWith('/v1alpha2/grpcroutes') ? [route] : [];
        return { resourceVersion: '1', items, continueToken: undefined };
      },
    } as unknown as KubeApi;
    const { list, errors } = await listClusterObjects(api);
    expect(errors).toEqual([]);
    expect(list.items).toEqual([{ apiVersion: 'gateway.networking.k8s.io/v1alpha2', kind: 'GRPCRoute', ...route }]);
    const tmp = mkdtempSync(join(tmpdir(), 'cbb-kube-'));
    try {
      writeFileSync(join(tmp, 'cluster.json'), JSON.stringify(list));
      // Read back as a GRPCRoute, not skipped for its apiVersion.
      const { warnings } = loadClusterFile(join(tmp, 'cluster.json'), { nodeName: 'node-a' });
      expect(warnings.filter((w) => w.includes('GRPCRoute'))).toEqual([]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});

describe('listClusterObjects without the Gateway API', () => {
  it('lists each Gateway kind at its first version only, and asks for the group once', async () => {
    const listed: string[] = [];
    const discovered: string[] = [];
    const api = {
      serves: async (path: string) => (discovered.push(path), false),
      async listPage(path: string) {
        listed.push(path);
        if (path.includes('gateway')) throw new ApiError(`GET ${path}: 404 NotFound`, 404);
        return { resourceVersion: '1', items: [], continueToken: undefined };
      },
    } as unknown as KubeApi;
    const { errors } = await listClusterObjects(api);
    expect(errors).toEqual([]);
    expect(listed.filter((p) => p.includes('gateway'))).toHaveLength(GATEWAY_KINDS.length);
    expect(discovered).toEqual(['/apis/gateway.networking.k8s.io']);
  });
});

describe('listClusterObjects and expired continue tokens', () => {
  /** An API whose EndpointSlice list has two pages; the second answers 410 `expiries` times, then the page. */
  function expiringApi(expiries: number) {
    const slices = [{ metadata: { name: 'a', namespace: 'shop' } }, { metadata: { name: 'b', namespace: 'shop' } }];
    const listed: string[] = [];
    const api = {
      async listPage(path: string, query: Record<string, string>) {
        if (!path.endsWith('/v1/endpointslices')) return { resourceVersion: '1', items: [], continueToken: undefined };
        listed.push(query.continue ?? 'first');
        if (query.continue === undefined) return { resourceVersion: '1', items: [slices[0]], continueToken: 'tok' };
        if (expiries-- > 0) throw new ApiError(`GET ${path}: 410 Expired: continue parameter is too old`, 410);
        return { resourceVersion: '1', items: [slices[1]], continueToken: undefined };
      },
    } as unknown as KubeApi;
    return { api, listed };
  }
  const names = (items: unknown[]) => items.map((i) => (i as { metadata: { name: string } }).metadata.name);

  it('a 410 on a continued page starts the list again: every object once, no error', async () => {
    const { api, listed } = expiringApi(1);
    const { list, errors } = await listClusterObjects(api);
    expect(errors).toEqual([]);
    expect(names(list.items)).toEqual(['a', 'b']);
    expect(listed).toEqual(['first', 'tok', 'first', 'tok']);
  });

  it('a 410 after every restart: the kind is an error, none of its pages kept', async () => {
    const { api } = expiringApi(Number.POSITIVE_INFINITY);
    const { list, errors } = await listClusterObjects(api);
    expect(errors).toEqual([expect.stringMatching(/^EndpointSlice list: GET .*endpointslices: 410 Expired/)]);
    expect(list.items).toEqual([]);
  });
});
