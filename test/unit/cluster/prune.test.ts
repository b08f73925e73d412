// Pruning the watch stores' objects must not change the view: built from
// pruned and unpruned objects, services, node and warnings are equal, for the
// real kubectl fixture, the malformed fixture and malformed variants of an
// object as the API server sends it (managedFields and all).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { buildClusterView } from '../../../src/cluster/build.js';
import { readClusterFile } from '../../../src/cluster/file.js';
import { emptyObjects, type ClusterObjects } from '../../../src/cluster/objects.js';
import { PRUNE } from '../../../src/cluster/prune.js';

const FIX = new URL('../../fixtures/cluster/', import.meta.url).pathname;

function pruned(objects: ClusterObjects): ClusterObjects {
  const out = emptyObjects();
  for (const kind of Object.keys(out) as (keyof ClusterObjects)[]) {
    out[kind] = objects[kind].map(({ origin, object }) => ({ origin, object: PRUNE[kind](structuredClone(object)) }));
  }
  return out;
}

function expectSameView(objects: ClusterObjects): void {
  const opts = { nodeName: 'node-a', syncedAt: '2026-11-21T00:00:00.000Z' };
  const before = JSON.stringify(objects);
  expect(buildClusterView(pruned(objects), opts)).toEqual(buildClusterView(objects, opts));
  // Pruning copies; the objects it was given are untouched.
  expect(JSON.stringify(objects)).toBe(before);
}

/** A LoadBalancer Service as the API server lists it (not kubectl, which hides managedFields). */
function apiService(): Record<string, unknown> {
  const lastApplied = JSON.stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'shop' }, spec: { type: 'LoadBalancer' } });
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name: 'web',
      namespace: 'shop',
      uid: '0b4e8f0e-3c55-4e43-9f2c-1d7a1f0c2b9e',
      resourceVersion: '73311',
      creationTimestamp: '2026-11-02T10:11:12Z',
      labels: { app: 'web' },
      annotations: {
        'kubectl.kubernetes.io/last-applied-configuration': lastApplied,
        'service.cloud.tencent.com/prevent-loopback': 'true',
        'service.beta.kubernetes.io/aws-load-balancer-internal': 'true',
      },
      finalizers: ['service.kubernetes.io/load-balancer-cleanup'],
      managedFields: [
        { manager: 'kubectl-client-side-apply', operation: 'Update', apiVersion: 'v1', time: '2026-11-02T10:11:12Z', fieldsType: 'FieldsV1', fieldsV1: { 'f:spec': { 'f:ports': {}, 'f:selector': {} } } },
        { manager: 'cloud-controller-manager', operation: 'Update', apiVersion: 'v1', subresource: 'status', fieldsType: 'FieldsV1', fieldsV1: { 'f:status': { 'f:loadBalancer': { 'f:ingress': {} } } } },
      ],
    },
    spec: {
      type: 'LoadBalancer',
      clusterIP: '172.16.0.10',
      clusterIPs: ['172.16.0.10'],
      ipFamilies: ['IPv4'],
      ipFamilyPolicy: 'SingleStack',
      externalTrafficPolicy: 'Local',
      internalTrafficPolicy: 'Cluster',
      healthCheckNodePort: 31999,
      allocateLoadBalancerNodePorts: true,
      sessionAffinity: 'None',
      selector: { app: 'web' },
      ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 'http', nodePort: 31080 }],
    },
    status: { loadBalancer: { ingress: [{ ip: '10.0.0.50', ipMode: 'VIP' }] }, conditions: [] },
  };
}

function apiSlice(): Record<string, unknown> {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: 'web-x7k2p',
      generateName: 'web-',
      namespace: 'shop',
      labels: { 'kubernetes.io/service-name': 'web', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2026-11-02T10:11:20Z' },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: 'web', uid: '0b4e8f0e-3c55-4e43-9f2c-1d7a1f0c2b9e', controller: true, blockOwnerDeletion: true }],
      managedFields: [{ manager: 'kube-controller-manager', operation: 'Update', fieldsType: 'FieldsV1', fieldsV1: { 'f:endpoints': {} } }],
    },
    addressType: 'IPv4',
    endpoints: [
      { addresses: ['10.244.1.7'], conditions: { ready: true, serving: true, terminating: false }, nodeName: 'node-a', zone: 'z1', targetRef: { kind: 'Pod', namespace: 'shop', name: 'web-1', uid: 'u1' } },
      { addresses: ['10.244.2.9'], conditions: { ready: false, serving: true, terminating: true }, nodeName: 'node-b', hints: { forZones: [{ name: 'z1' }] } },
    ],
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
  };
}

function apiNode(): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: 'node-a', labels: { 'kubernetes.io/hostname': 'node-a' }, managedFields: [{ manager: 'kubelet' }] },
    spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'], providerID: 'qcloud:///1/ins-1' },
    status: {
      addresses: [{ type: 'InternalIP', address: '10.0.1.11' }, { type: 'Hostname', address: 'node-a' }],
      images: [{ names: ['registry/app@sha256:00', 'registry/app:1'], sizeBytes: 1 }],
      nodeInfo: { kernelVersion: '6.1.0' },
    },
  };
}

function apiIngress(): Record<string, unknown> {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'Ingress',
    metadata: { name: 'web', namespace: 'shop', managedFields: [{ manager: 'x' }], annotations: { 'kubernetes.io/ingress.class': 'qcloud' } },
    spec: { ingressClassName: 'qcloud', tls: [{ hosts: ['a.example'] }], rules: [{ host: 'a.example', http: { paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: 'web', port: { name: 'http' } } } }] } }] },
    status: { loadBalancer: { ingress: [{ ip: '10.0.0.60' }] } },
  };
}

function apiObjects(): ClusterObjects {
  const o = emptyObjects();
  o.services.push({ origin: 'watch', object: apiService() });
  o.endpointSlices.push({ origin: 'watch', object: apiSlice() });
  o.ingresses.push({ origin: 'watch', object: apiIngress() });
  o.nodes.push({ origin: 'watch', object: apiNode() });
  return o;
}

describe('PRUNE', () => {
  it('keeps the view of the real kubectl fixture and of the malformed fixture, warnings included', () => {
    for (const file of ['kubectl-list.json', 'malformed-objects.json', 'multi-doc.json']) {
      const { objects } = readClusterFile(`${FIX}${file}`);
      expectSameView(objects);
    }
    // The malformed fixture does produce warnings: the comparison above covers them.
    const { objects } = readClusterFile(`${FIX}malformed-objects.json`);
    expect(buildClusterView(pruned(objects), { nodeName: 'node-a' }).warnings.length).toBeGreaterThan(5);
  });

  it('drops what the view never reads from objects as the API server sends them', () => {
    const objects = apiObjects();
    expectSameView(objects);
    const p = pruned(objects);
    const svc = p.services[0]!.object as { metadata: Record<string, unknown>; spec: Record<string, unknown>; status: Record<string, unknown> };
    expect(Object.keys(svc.metadata)).toEqual(['name', 'namespace', 'annotations']);
    expect(Object.keys(svc.metadata.annotations as object)).toEqual([
      'service.cloud.tencent.com/prevent-loopback',
      'service.beta.kubernetes.io/aws-load-balancer-internal',
    ]);
    expect(svc.spec.selector).toBeUndefined();
    expect(svc.status).toEqual({ loadBalancer: { ingress: [{ ip: '10.0.0.50', ipMode: 'VIP' }] } });
    const slice = p.endpointSlices[0]!.object as { metadata: Record<string, unknown>; endpoints: object[] };
    expect(slice.metadata).toEqual({ name: 'web-x7k2p', namespace: 'shop', labels: { 'kubernetes.io/service-name': 'web' } });
    expect(slice.endpoints[0]).toEqual({ addresses: ['10.244.1.7'], conditions: { ready: true, serving: true, terminating: false }, nodeName: 'node-a' });
    const node = p.nodes[0]!.object as { status: Record<string, unknown> };
    expect(Object.keys(node.status)).toEqual(['addresses']);
    const size = (o: ClusterObjects): number => JSON.stringify(o).length;
    expect(size(p)).toBeLessThan(size(objects) / 2);
  });

  // Each variant breaks one field the builder reads, or one it does not; the view and
  // its warnings must come out the same either way.
  const variants: [string, (o: ClusterObjects) => void][] = [
    ['an unrelated annotation that is not a string (the builder rejects the map)', (o) => ((svcOf(o).metadata as Rec).annotations = { 'x/y': 5 })],
    ['annotations that are a list', (o) => ((svcOf(o).metadata as Rec).annotations = ['a'])],
    ['metadata that is a string', (o) => (svcOf(o).metadata = 'web')],
    ['spec that is a list', (o) => (svcOf(o).spec = [1])],
    ['spec.ports that is an object', (o) => ((svcOf(o).spec as Rec).ports = { http: 80 })],
    ['status.loadBalancer.ingress with a bad ipMode', (o) => ((svcOf(o).status as Rec).loadBalancer = { ingress: [{ ip: '10.0.0.50', ipMode: 'Tunnel' }] })],
    ['a Service that is null', (o) => (o.services[0]!.object = null)],
    ['a slice label that is a number', (o) => ((sliceOf(o).metadata as Rec).labels = { 'kubernetes.io/service-name': 'web', other: 1 })],
    ['slice labels without the service name', (o) => ((sliceOf(o).metadata as Rec).labels = { app: 'web' })],
    ['endpoints that are an object', (o) => (sliceOf(o).endpoints = { a: 1 })],
    ['an endpoint that is a string', (o) => ((sliceOf(o).endpoints as unknown[])[0] = '10.244.1.7')],
    ['an endpoint whose conditions are a list', (o) => (((sliceOf(o).endpoints as Rec[])[0]!).conditions = [true])],
    ['node addresses that are an object', (o) => ((nodeOf(o).status as Rec).addresses = { InternalIP: '10.0.1.11' })],
    ['node status that is a number', (o) => (nodeOf(o).status = 3)],
    ['an ingress rule that is a string', (o) => (((o.ingresses[0]!.object as Rec).spec as Rec).rules = ['web'])],
  ];
  it.each(variants)('keeps the view and warnings with %s', (_, breakIt) => {
    const objects = apiObjects();
    breakIt(objects);
    expectSameView(objects);
  });
});

type Rec = Record<string, unknown>;
const svcOf = (o: ClusterObjects): Rec => o.services[0]!.object as Rec;
const sliceOf = (o: ClusterObjects): Rec => o.endpointSlices[0]!.object as Rec;
const nodeOf = (o: ClusterObjects): Rec => o.nodes[0]!.object as Rec;
