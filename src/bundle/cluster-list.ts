// A bundle's cluster.json from the API: the v1 List `kubectl get svc,ingress,endpointslices,nodes -A -o json` prints.
import { ApiError, type KubeApi } from '../cluster/kube-api.js';
import { apiVersionOf, collectionPath, KIND_APIS, KINDS } from '../cluster/objects.js';
import { errText } from '../errors.js';

/** Each kind at the version the agent watches. */
const COLLECTIONS = KINDS.map((k) => {
  const api = KIND_APIS[k];
  return { path: collectionPath(api), kind: api.kind, apiVersion: apiVersionOf(api), crd: api.crd };
});

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
