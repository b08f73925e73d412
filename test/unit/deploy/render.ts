// An offline renderer for the part of kustomize that deploy/kustomization.yaml
// uses: resources (multi-document YAML files), namespace (set on namespaced
// objects), labels (metadata only, includeSelectors false) and
// configMapGenerator (files, labels, disableNameSuffixHash) and components (kind
// Component: resources only; `extraComponents` renders as if listed). Any other key is
// an error, so a kustomization that grows beyond this subset fails the tests
// instead of rendering wrong.
import { readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

interface Kustomization {
  apiVersion?: string;
  kind?: string;
  namespace?: string;
  labels?: { pairs: Record<string, string>; includeSelectors?: boolean; includeTemplates?: boolean }[];
  resources?: string[];
  components?: string[];
  configMapGenerator?: {
    name: string;
    files?: string[];
    options?: { labels?: Record<string, string>; disableNameSuffixHash?: boolean };
  }[];
}

const KNOWN = new Set(['apiVersion', 'kind', 'namespace', 'labels', 'resources', 'components', 'configMapGenerator']);
const KNOWN_IN_COMPONENT = new Set(['apiVersion', 'kind', 'resources']);
/** Kinds without a namespace among those this project deploys. */
const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding']);

export function renderKustomization(dir: string, extraComponents: string[] = []): K8sObject[] {
  const file = join(dir, 'kustomization.yaml');
  const k = parse(readFileSync(file, 'utf8')) as Kustomization;
  for (const key of Object.keys(k))
    if (!KNOWN.has(key)) throw new Error(`${file}: key ${key} is not supported by this renderer`);
  const objects: K8sObject[] = [];
  const readResources = (base: string, resources: string[]): void => {
    for (const res of resources) {
      const path = resolve(base, res);
      for (const doc of parseAllDocuments(readFileSync(path, 'utf8'))) {
        if (doc.errors.length > 0) throw new Error(`${path}: ${doc.errors[0]!.message}`);
        const obj = doc.toJS() as K8sObject | null;
        if (obj !== null) objects.push(obj);
      }
    }
  };
  readResources(dir, k.resources ?? []);
  for (const c of [...(k.components ?? []), ...extraComponents]) {
    const cdir = resolve(dir, c);
    const cfile = join(cdir, 'kustomization.yaml');
    const comp = parse(readFileSync(cfile, 'utf8')) as Kustomization;
    if (comp.kind !== 'Component') throw new Error(`${cfile}: kind ${comp.kind} is not Component`);
    for (const key of Object.keys(comp))
      if (!KNOWN_IN_COMPONENT.has(key)) throw new Error(`${cfile}: key ${key} is not supported by this renderer`);
    readResources(cdir, comp.resources ?? []);
  }
  for (const gen of k.configMapGenerator ?? []) {
    if (gen.options?.disableNameSuffixHash !== true)
      throw new Error(`${file}: configMapGenerator ${gen.name}: name hashing is not supported here`);
    const data: Record<string, string> = {};
    for (const f of gen.files ?? []) {
      const [key, src] = f.includes('=') ? (f.split('=', 2) as [string, string]) : [basename(f), f];
      data[key] = readFileSync(join(dir, src), 'utf8');
    }
    const labels = gen.options?.labels;
    objects.push({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: gen.name, ...(labels ? { labels: { ...labels } } : {}) },
      data,
    });
  }
  for (const o of objects) {
    if (k.namespace && !CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
    for (const l of k.labels ?? []) {
      if (l.includeSelectors || l.includeTemplates)
        throw new Error(`${file}: labels into selectors/templates are not supported here`);
      o.metadata.labels = { ...o.metadata.labels, ...l.pairs };
    }
  }
  return objects;
}
