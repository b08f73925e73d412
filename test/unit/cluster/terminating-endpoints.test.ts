// Endpoints that terminate while still serving (a rollout): read from EndpointSlices, also through the
// watcher's object shapes, and counted as kube-proxy counts them for ETP=Local.
import { describe, expect, it } from 'vitest';
import { buildClusterView } from '../../../src/cluster/build.js';
import { usableLocally } from '../../../src/cluster/endpoints.js';
import { classifyDocuments } from '../../../src/cluster/file.js';
import { reduceText, SkippedObject } from '../../../src/cluster/json-reduce.js';
import { DEFAULT_API_LIMITS } from '../../../src/cluster/kube-api.js';
import { OBJECT_SHAPES } from '../../../src/cluster/object-shapes.js';
import type { ClusterObjects } from '../../../src/cluster/objects.js';
import type { ClusterView } from '../../../src/cluster/types.js';

const service = {
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: 'web', namespace: 'shop' },
  spec: { type: 'LoadBalancer', externalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80, nodePort: 30080 }] },
  status: { loadBalancer: { ingress: [{ ip: '203.0.113.10' }] } },
};

/** A slice of `web` with one endpoint per conditions object, each on `nodeName`. */
function slice(nodeName: string, ...conditions: object[]) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: 'web-1', namespace: 'shop', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: conditions.map((c, i) => ({ addresses: [`10.244.1.${i + 1}`], nodeName, conditions: c })),
  };
}

const limits = { maxValueBytes: DEFAULT_API_LIMITS.maxValueBytes, maxUnitBytes: DEFAULT_API_LIMITS.maxEventBytes };

/** The view from whole objects, and from the objects reduced as the watcher keeps them. */
function views(...items: object[]): [string, ClusterView][] {
  const { objects } = classifyDocuments(items);
  const reduced: ClusterObjects = { ...objects };
  reduced.endpointSlices = objects.endpointSlices.map((s) => {
    const object = reduceText(JSON.stringify(s.object), OBJECT_SHAPES.endpointSlices, limits);
    if (object instanceof SkippedObject) throw new Error(object.reason);
    return { ...s, object };
  });
  return [
    ['whole', buildClusterView(objects, { nodeName: 'node-a' })],
    ['reduced', buildClusterView(reduced, { nodeName: 'node-a' })],
  ];
}

describe('terminating endpoints', () => {
  it('the only local pod terminating but serving: usable locally, as kube-proxy falls back to it', () => {
    for (const [how, view] of views(service, slice('node-a', { ready: false, serving: true, terminating: true }))) {
      const web = view.services[0]!;
      expect(web.endpoints, how).toEqual([
        { address: '10.244.1.1', nodeName: 'node-a', ready: false, local: true, servingTerminating: true },
      ]);
      expect(usableLocally(web.endpoints), how).toBe(true);
    }
  });

  it('terminating and no longer serving, or not ready and not terminating: not usable', () => {
    const items = [service, slice('node-a', { ready: false, serving: false, terminating: true }, { ready: false })];
    for (const [how, view] of views(...items)) {
      const web = view.services[0]!;
      expect(
        web.endpoints.map((e) => e.servingTerminating),
        how,
      ).toEqual([undefined, undefined]);
      expect(usableLocally(web.endpoints), how).toBe(false);
    }
  });

  it('serving terminating on another node only: not usable on this one', () => {
    for (const [how, view] of views(service, slice('node-b', { ready: false, serving: true, terminating: true })))
      expect(usableLocally(view.services[0]!.endpoints), how).toBe(false);
  });

  it('no conditions: ready (and serving), as the API defaults them', () => {
    for (const [how, view] of views(service, slice('node-a', {}))) {
      expect(view.services[0]!.endpoints[0], how).toMatchObject({ ready: true, local: true });
      expect(usableLocally(view.services[0]!.endpoints), how).toBe(true);
    }
  });
});
