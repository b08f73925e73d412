// What the watcher keeps of each object (src/cluster/object-shapes.ts) must be all the view
// reads: the view built from reduced objects is the one built from whole objects, warnings and
// all, for the fixture clusters (well-formed, malformed) and the demo lab.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments } from '../../../src/cluster/file.js';
import { type ReduceLimits, reduceText, SkippedObject } from '../../../src/cluster/json-reduce.js';
import { DEFAULT_API_LIMITS } from '../../../src/cluster/kube-api.js';
import { eventShape, OBJECT_SHAPES } from '../../../src/cluster/object-shapes.js';
import type { ClusterObjects } from '../../../src/cluster/objects.js';
import { clusterList } from '../../../src/demo/lab.js';
import { endpointSliceV1beta1 } from '../../support/kube-objects.js';

const FIX = new URL('../../fixtures/cluster/', import.meta.url).pathname;
const LIMITS: ReduceLimits = {
  maxValueBytes: DEFAULT_API_LIMITS.maxValueBytes,
  maxUnitBytes: DEFAULT_API_LIMITS.maxEventBytes,
};
const KINDS = Object.keys(OBJECT_SHAPES) as (keyof typeof OBJECT_SHAPES)[];
const BUNDLES = new URL('../../fixtures/bundles/', import.meta.url).pathname;

/** Each object as the watcher reads it from the API: its JSON text through its kind's shape. */
function reduced(objects: ClusterObjects): ClusterObjects {
  const out = { ...objects };
  for (const kind of KINDS) {
    out[kind] = objects[kind].map((s) => {
      const object = reduceText(JSON.stringify(s.object), OBJECT_SHAPES[kind], LIMITS);
      if (object instanceof SkippedObject) throw new Error(`${s.origin} skipped: ${object.reason}`);
      return { ...s, object };
    });
  }
  return out;
}

const clusters: [string, unknown][] = [
  ['kubectl-list.json', JSON.parse(readFileSync(`${FIX}kubectl-list.json`, 'utf8'))],
  ['malformed-objects.json', JSON.parse(readFileSync(`${FIX}malformed-objects.json`, 'utf8'))],
  [
    'Gateway API: GatewayClass, Gateway, HTTPRoute (bundles/l7-gateway-loop)',
    JSON.parse(readFileSync(`${BUNDLES}l7-gateway-loop/cluster.json`, 'utf8')),
  ],
  ['the demo lab (ETP Local)', clusterList('Local')],
  ['the demo lab (ETP Cluster)', clusterList('Cluster')],
  [
    'the demo lab as 1.20 serves it (v1beta1: the node in topology)',
    v1beta1(clusterList('Local') as { items: Record<string, unknown>[] }),
  ],
];

function v1beta1(list: { items: Record<string, unknown>[] }): unknown {
  return { ...list, items: list.items.map((i) => (i.kind === 'EndpointSlice' ? endpointSliceV1beta1(i) : i)) };
}

describe('the view from reduced objects is the view from whole ones', () => {
  for (const [name, list] of clusters) {
    it(name, () => {
      const { objects } = classifyDocuments([list]);
      const count = KINDS.reduce((n, k) => n + objects[k].length, 0);
      expect(count).toBeGreaterThan(0);
      for (const nodeName of ['node-a', 'node1']) {
        expect(buildClusterView(reduced(objects), { nodeName })).toEqual(buildClusterView(objects, { nodeName }));
      }
    });
  }

  it('and what the view does not read is gone: managedFields, selectors, timestamps', () => {
    const { objects } = classifyDocuments([JSON.parse(readFileSync(`${FIX}kubectl-list.json`, 'utf8'))]);
    const text = JSON.stringify(reduced(objects));
    expect(JSON.stringify(objects)).toMatch(/"selector"|"managedFields"|"creationTimestamp"/);
    expect(text).not.toMatch(/"selector"|"managedFields"|"creationTimestamp"/);
  });

  it("keeps an ERROR event's Status", () => {
    const status = {
      kind: 'Status',
      apiVersion: 'v1',
      status: 'Failure',
      code: 410,
      reason: 'Expired',
      message: 'too old resource version: 1 (5)',
      metadata: {},
    };
    expect(
      reduceText(JSON.stringify({ type: 'ERROR', object: status }), eventShape(OBJECT_SHAPES.services), LIMITS),
    ).toEqual({
      type: 'ERROR',
      object: {
        code: 410,
        reason: 'Expired',
        message: 'too old resource version: 1 (5)',
        metadata: {},
        status: 'Failure',
      },
    });
  });
});
