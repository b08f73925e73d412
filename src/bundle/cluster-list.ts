// cluster.json for a bundle straight from the API (kubeconfig or in-cluster
// service account): the same v1 List `kubectl get svc,ingress,endpointslices,
// nodes -A -o json` prints, so the bundle reader and --cluster-file take it.
// Paged raw JSON lists through the cluster module's KubeApi.
import type { KubeApi } from '../cluster/kube-api.js';

const COLLECTIONS = [
  { path: '/api/v1/services', kind: 'Service', apiVersion: 'v1' },
  { path: '/apis/discovery.k8s.io/v1/endpointslices', kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1' },
  { path: '/apis/networking.k8s.io/v1/ingresses', kind: 'Ingress', apiVersion: 'networking.k8s.io/v1' },
  { path: '/api/v1/nodes', kind: 'Node', apiVersion: 'v1' },
] as const;

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
      errors.push(`${c.kind} list: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  return { list: { apiVersion: 'v1', kind: 'List', items }, errors };
}
