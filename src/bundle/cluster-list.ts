// A bundle's cluster.json from the API: the v1 List `kubectl get svc,ingress,endpointslices,nodes -A -o json` prints.
import { ApiError, type KubeApi } from '../cluster/kube-api.js';
import { apiVersionOf, collectionPath, KIND_APIS, KINDS } from '../cluster/objects.js';
import { MAX_LIST_RESTARTS } from '../cluster/reflector.js';
import { errText } from '../errors.js';

interface Collection {
  path: string;
  apiVersion: string;
}

/** Each kind at the versions the agent reads: the first, or the next where the one before is not served (404). */
const KIND_COLLECTIONS = KINDS.map((k) => {
  const api = KIND_APIS[k];
  const versions = api.versions.map(
    (v): Collection => ({ path: collectionPath(api, v), apiVersion: apiVersionOf(api, v) }),
  );
  return { kind: api.kind, versions, groupPath: api.crd ? `/apis/${api.group}` : undefined, optional: api.optional };
});

export interface ClusterList {
  list: { apiVersion: 'v1'; kind: 'List'; items: unknown[] };
  /** Collections that could not be listed; the rest is kept. */
  errors: string[];
  /** Optional kinds not readable (no RBAC for Ingresses or Gateway API kinds), treated as empty as the agent does. */
  notes: string[];
}

export async function listClusterObjects(api: KubeApi, pageSize = 500): Promise<ClusterList> {
  const items: unknown[] = [];
  const errors: string[] = [];
  const notes: string[] = [];
  // A CRD group that is not served at all (404) has no other version of its kinds to try: asked once per group.
  const groups = new Map<string, Promise<boolean>>();
  const groupServed = (path: string): Promise<boolean> => {
    const known = groups.get(path) ?? servedOrUnknown(api, path);
    groups.set(path, known);
    return known;
  };
  for (const c of KIND_COLLECTIONS) {
    try {
      for (const item of await listKind(api, c, pageSize, groupServed)) items.push(item);
    } catch (e) {
      if (c.groupPath !== undefined && e instanceof ApiError && e.statusCode === 404) continue;
      const unreadable = c.optional && e instanceof ApiError && (e.statusCode === 403 || e.statusCode === 404);
      (unreadable ? notes : errors).push(`${c.kind} list: ${errText(e)}`);
    }
  }
  return { list: { apiVersion: 'v1', kind: 'List', items }, errors, notes };
}

/** Whether the API server serves `path`; true when that cannot be told, so that the other versions are tried. */
async function servedOrUnknown(api: KubeApi, path: string): Promise<boolean> {
  try {
    return await api.serves(path);
  } catch {
    return true;
  }
}

/** The kind's objects at the first of its versions that is served; the first 404 when none is. */
async function listKind(
  api: KubeApi,
  c: (typeof KIND_COLLECTIONS)[number],
  pageSize: number,
  groupServed: (path: string) => Promise<boolean>,
): Promise<unknown[]> {
  const [first, ...others] = c.versions;
  try {
    return await listCollection(api, c.kind, first!, pageSize);
  } catch (e) {
    if (!(e instanceof ApiError && e.statusCode === 404)) throw e;
    if (c.groupPath !== undefined && !(await groupServed(c.groupPath))) throw e;
    for (const collection of others) {
      try {
        return await listCollection(api, c.kind, collection, pageSize);
      } catch (next) {
        if (!(next instanceof ApiError && next.statusCode === 404)) throw next;
      }
    }
    throw e;
  }
}

/** Every page of one collection, started again (as the agent's reflector does) when a continued page gets 410. */
async function listCollection(api: KubeApi, kind: string, c: Collection, pageSize: number): Promise<unknown[]> {
  for (let restarts = 0; ; restarts++) {
    const items = await listPages(api, kind, c, pageSize, restarts < MAX_LIST_RESTARTS);
    if (items) return items;
  }
}

/** The items of every page; undefined on a 410 on a continued page when `mayRestart` (etcd compacted page 1's). */
async function listPages(api: KubeApi, kind: string, c: Collection, pageSize: number, mayRestart: boolean) {
  const items: unknown[] = [];
  let cont: string | undefined;
  do {
    const query = { limit: String(pageSize), ...(cont ? { continue: cont } : {}) };
    const page = await api.listPage(c.path, query).catch((e: unknown) => {
      if (cont && mayRestart && e instanceof ApiError && e.statusCode === 410) return undefined;
      throw e;
    });
    if (!page) return undefined;
    // Items of a typed list carry no kind/apiVersion; a v1 List's items must.
    for (const item of page.items) items.push({ apiVersion: c.apiVersion, kind, ...(item as object) });
    cont = page.continueToken;
  } while (cont);
  return items;
}
