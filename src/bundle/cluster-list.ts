// A bundle's cluster.json from the API: the v1 List `kubectl get svc,ingress,endpointslices,nodes -A -o json` prints.
import { ApiError, type KubeApi } from '../cluster/kube-api.js';
import { errText } from '../errors.js';

interface Collection {
  path: string;
  kind: string;
  apiVersion: string;
  crd?: boolean;
}

const COLLECTIONS: readonly Collection[] = [
  { path: '/api/v1/services', kind: 'Service', apiVersion: 'v1' },
  { path: '/apis/discovery.k8s.io/v1/endpointslices', kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1' },
  { path: '/apis/networking.k8s.io/v1/ingresses', kind: 'Ingress', apiVersion: 'networking.k8s.io/v1' },
  { path: '/api/v1/nodes', kind: 'Node', apiVersion: 'v1' },
  gatewayApi('gatewayclasses', 'GatewayClass', 'v1'),
  gatewayApi('gateways', 'Gateway', 'v1'),
  gatewayApi('httproutes', 'HTTPRoute', 'v1'),
  gatewayApi('grpcroutes', 'GRPCRoute', 'v1'),
  gatewayApi('tlsroutes', 'TLSRoute', 'v1alpha2'),
  gatewayApi('tcproutes', 'TCPRoute', 'v1alpha2'),
  gatewayApi('udproutes', 'UDPRoute', 'v1alpha2'),
  gatewayApi('referencegrants', 'ReferenceGrant', 'v1beta1'),
];

/** A Gateway API collection: a 404 is a cluster without its CRD, left out without an error. */
function gatewayApi(resource: string, kind: string, version: string): Collection {
  const apiVersion = `gateway.networking.k8s.io/${version}`;
  return { path: `/apis/${apiVersion}/${resource}`, kind, apiVersion, crd: true };
}

export interface ClusterList {
  list: { apiVersion: 'v1'; kind: 'List'; items: unknown[] };
  /** Collections that could not be listed (e.g. no RBAC for Ingresses); the rest is kept. */
  errors: string[];
}

export async function listClusterObjects(api: KubeApi, pageSize = 500): Promise<ClusterList> {
  const items: unknown[] = [];
  const errors: string[] = [];
  for (const c of COLLECTIONS) {
    try {
      let cont: string | undefined;
      do {
        const page = await api.listPage(c.path, { limit: String(pageSize), ...(cont ? { continue: cont } : {}) });
        // Items of a typed list carry no kind/apiVersion; a v1 List's items must.
        for (const item of page.items) items.push({ apiVersion: c.apiVersion, kind: c.kind, ...(item as object) });
        cont = page.continueToken;
      } while (cont);
    } catch (e) {
      if (c.crd && e instanceof ApiError && e.statusCode === 404) continue;
      errors.push(`${c.kind} list: ${errText(e)}`);
    }
  }
  return { list: { apiVersion: 'v1', kind: 'List', items }, errors };
}
