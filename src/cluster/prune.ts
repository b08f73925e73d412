// What the cluster view reads of each kind, and nothing else: the watch
// stores keep objects for as long as they exist, and an API object is mostly
// fields the view never reads (managedFields, last-applied-configuration,
// selectors, a Node's image list, an endpoint's targetRef and zone...).
// client-go informers do the same with a TransformFunc.
//
// Pruning must not change the view, its warnings included: a field is either
// dropped because no parser reads it, or kept exactly as it came (malformed
// values too, so the builder still names them). test/unit/cluster/prune.test.ts
// builds the view from pruned and unpruned objects and compares.
import { isLoopbackAnnotation } from './annotations.js';
import { SERVICE_NAME_LABEL } from './endpoints.js';
import { isObj, type Obj } from './fields.js';
import type { ClusterObjects } from './objects.js';

type Keep = true | ((v: unknown) => unknown);

/** Only `keys` of a plain object, each kept as is or passed through its function; anything else unchanged. */
function pick(keys: Record<string, Keep>): (v: unknown) => unknown {
  return (v) => {
    if (!isObj(v)) return v;
    const out: Obj = {};
    for (const [k, keep] of Object.entries(keys)) {
      if (!Object.hasOwn(v, k)) continue;
      out[k] = keep === true ? v[k] : keep(v[k]);
    }
    return out;
  };
}

/** Each element of a list through `f`; anything else unchanged. */
const each =
  (f: (v: unknown) => unknown) =>
  (v: unknown): unknown =>
    Array.isArray(v) ? v.map(f) : v;

/**
 * Only the entries of a string map whose key is wanted; entries whose value is not
 * a string are kept too, since the parser rejects the whole map for one of them.
 */
const entries =
  (wanted: (key: string) => boolean) =>
  (v: unknown): unknown =>
    isObj(v) ? Object.fromEntries(Object.entries(v).filter(([k, val]) => wanted(k) || typeof val !== 'string')) : v;

const NAME = { name: true, namespace: true } as const;

const service = pick({
  metadata: pick({ ...NAME, annotations: entries(isLoopbackAnnotation) }),
  spec: pick({
    type: true,
    clusterIP: true,
    clusterIPs: true,
    externalIPs: true,
    externalTrafficPolicy: true,
    internalTrafficPolicy: true,
    healthCheckNodePort: true,
    loadBalancerClass: true,
    ports: true,
  }),
  status: pick({ loadBalancer: true }),
});

const endpointSlice = pick({
  metadata: pick({ ...NAME, labels: entries((k) => k === SERVICE_NAME_LABEL) }),
  addressType: true,
  ports: true,
  endpoints: each(pick({ addresses: true, conditions: true, nodeName: true })),
});

const ingress = pick({
  metadata: pick(NAME),
  spec: pick({ defaultBackend: true, rules: true }),
  status: pick({ loadBalancer: true }),
});

const node = pick({
  metadata: pick(NAME),
  spec: pick({ podCIDR: true, podCIDRs: true }),
  status: pick({ addresses: true }),
});

/** The pruning function for each kind of ClusterObjects. */
export const PRUNE: Record<keyof ClusterObjects, (object: unknown) => unknown> = {
  services: service,
  endpointSlices: endpointSlice,
  ingresses: ingress,
  nodes: node,
};
