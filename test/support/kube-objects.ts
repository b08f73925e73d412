// Puts a scenario's objects into a real API server the way the cluster's own controllers would
// leave them, through the API only: Namespaces, Services (then their LB address through the
// status subresource, as a cloud controller does), EndpointSlices (what the endpointslice
// controller would write; there is no controller-manager here), Ingresses and Nodes (their
// addresses through /status, as a kubelet does). Input: the `kubectl get -o json` shapes the
// labs use (src/demo/lab.ts clusterList); EndpointSlices are written as the server serves them
// (1.20: discovery.k8s.io/v1beta1, the node in topology["kubernetes.io/hostname"]).
import { errText } from '../../src/errors.js';
import type { ControlPlane } from './kube-control-plane.js';
import { until } from './wait.js';

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const SERVED_SLICE_VERSION = 'discovery.k8s.io/v1beta1';

/** A discovery.k8s.io/v1 EndpointSlice as 1.20 takes it: v1beta1, nodeName moved to topology. */
export function endpointSliceV1beta1(slice: Obj): Obj {
  const s = structuredClone(slice);
  s.apiVersion = SERVED_SLICE_VERSION;
  for (const ep of s.endpoints ?? []) {
    if (typeof ep.nodeName === 'string')
      ep.topology = { ...(ep.topology ?? {}), 'kubernetes.io/hostname': ep.nodeName };
    delete ep.nodeName;
  }
  return s;
}

/** Gateway API kinds (their CRDs: test/fixtures/gateway-api/crds.yaml), created at their own apiVersion. */
const GATEWAY_PLURALS: Record<string, string> = {
  GatewayClass: 'gatewayclasses',
  Gateway: 'gateways',
  HTTPRoute: 'httproutes',
  GRPCRoute: 'grpcroutes',
  TCPRoute: 'tcproutes',
  ReferenceGrant: 'referencegrants',
};

async function ensureNamespace(cp: ControlPlane, name: string): Promise<void> {
  const r = await cp.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
  if (r.status !== 201 && r.status !== 409)
    throw new Error(`namespace ${name}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
}

async function patchStatus(cp: ControlPlane, path: string, status: unknown): Promise<void> {
  const r = await cp.request('PATCH', `${path}/status`, { status });
  if (r.status !== 200) throw new Error(`PATCH ${path}/status: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
}

/** Creates one object (and its status); returns its API path. */
export async function createObject(cp: ControlPlane, input: Obj): Promise<string> {
  const o = structuredClone(input);
  const ns: string | undefined = o.metadata?.namespace;
  const status = o.status;
  delete o.status;
  delete o.metadata.resourceVersion;
  let collection: string;
  switch (o.kind) {
    case 'Service':
      collection = `/api/v1/namespaces/${ns}/services`;
      break;
    case 'EndpointSlice':
      Object.assign(o, endpointSliceV1beta1(o));
      collection = `/apis/${SERVED_SLICE_VERSION}/namespaces/${ns}/endpointslices`;
      break;
    case 'Ingress':
      collection = `/apis/networking.k8s.io/v1/namespaces/${ns}/ingresses`;
      break;
    case 'Node':
      collection = '/api/v1/nodes';
      break;
    default: {
      const plural = GATEWAY_PLURALS[o.kind as string];
      if (!plural || typeof o.apiVersion !== 'string')
        throw new Error(`createObject: kind ${String(o.kind)} is not handled`);
      collection = `/apis/${o.apiVersion}/${ns ? `namespaces/${ns}/` : ''}${plural}`;
    }
  }
  if (ns) await ensureNamespace(cp, ns);
  await cp.create(collection, o);
  const path = `${collection}/${o.metadata.name}`;
  if (status && o.kind !== 'EndpointSlice') await patchStatus(cp, path, status);
  return path;
}

/** Creates every item of a List, in order. */
export async function createList(cp: ControlPlane, list: { items: Obj[] }): Promise<string[]> {
  const paths: string[] = [];
  for (const item of list.items) paths.push(await createObject(cp, item));
  return paths;
}

/** Applies CRDs and waits until served; kubectl 1.20's wait fails, not waits, while a new CRD has no conditions yet. */
export async function installCrds(cp: ControlPlane, file: string): Promise<void> {
  cp.kubectl(['apply', '-f', file]);
  // `kubectl wait` fails with an accessor error until the API server serves the new kinds.
  await until(
    `the CRDs of ${file} established`,
    60_000,
    () => {
      try {
        cp.kubectl(['wait', '--for', 'condition=established', '--timeout', '60s', '-f', file]);
        return true;
      } catch (e) {
        if (!/accessor error/.test(errText(e))) throw e;
        return undefined;
      }
    },
    200,
  );
}
