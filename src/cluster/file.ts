// `--cluster-file`: the view from saved `kubectl get -o json` output; broken JSON fails with file, line and column.
import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { errText } from '../errors.js';
import { FileTooLargeError, readFileBounded } from '../read-bounded.js';
import { type BuildOptions, buildClusterView } from './build.js';
import { isObj } from './fields.js';
import { JsonSyntaxError, parseJsonDocuments } from './json-docs.js';
import { apiVersionOf, type ClusterObjects, emptyObjects, KIND_APIS, KINDS, type Kind } from './objects.js';
import type { ClusterView } from './types.js';

/** The file can't be used at all (unreadable, not JSON); message names the file. */
export class ClusterFileError extends Error {
  override readonly name = 'ClusterFileError';
}

/** Kind name (Service) → [bucket, apiVersions read]. */
const BY_KIND_NAME = new Map(
  KINDS.map((k): [string, [Kind, string[]]] => {
    const api = KIND_APIS[k];
    return [api.kind, [k, api.versions.map((v) => apiVersionOf(api, v))]];
  }),
);

/** Sorts the documents' objects by kind, with warnings for those skipped (unsupported kind or apiVersion). */
export function classifyDocuments(docs: readonly unknown[]): { objects: ClusterObjects; warnings: string[] } {
  const objects = emptyObjects();
  const warnings: string[] = [];
  const ignored = new Map<string, number>();
  const add = (origin: string, object: unknown, kind: unknown, apiVersion: unknown): void => {
    const known = typeof kind === 'string' ? BY_KIND_NAME.get(kind) : undefined;
    if (!known) {
      const k = typeof kind === 'string' && kind !== '' ? kind : '(no kind)';
      ignored.set(k, (ignored.get(k) ?? 0) + 1);
      return;
    }
    const [bucket, wanted] = known;
    if (apiVersion !== undefined && !wanted.includes(apiVersion as string)) {
      warnings.push(
        `${origin} (${String(kind)}): apiVersion ${JSON.stringify(apiVersion)} ` +
          `is not supported (want ${wanted.join(' or ')}), skipped`,
      );
      return;
    }
    objects[bucket].push({ origin, object });
  };

  docs.forEach((doc, d) => {
    const where = docs.length > 1 ? `document ${d + 1}` : '';
    const at = (s: string): string => (where ? `${where} ${s}` : s);
    if (!isObj(doc)) {
      warnings.push(`${where || 'document'}: not a Kubernetes object or List, skipped`);
      return;
    }
    const kind = typeof doc.kind === 'string' ? doc.kind : '';
    if (!kind.endsWith('List') || !Array.isArray(doc.items)) {
      add(where || 'object', doc, doc.kind, doc.apiVersion);
      return;
    }
    // A typed list (ServiceList) names its items' kind; a v1 List's items name their own.
    const itemKind = kind === 'List' ? undefined : kind.slice(0, -'List'.length);
    doc.items.forEach((item, i) => {
      const own = isObj(item) ? item : {};
      add(at(`items[${i}]`), item, own.kind ?? itemKind, own.apiVersion ?? (itemKind ? doc.apiVersion : undefined));
    });
  });
  if (ignored.size > 0) {
    const list = [...ignored].map(([k, n]) => `${n} ${k}`).join(', ');
    warnings.push(`ignored objects of kinds the cluster view does not use: ${list}`);
  }
  return { objects, warnings };
}

/** Same bound as an API server list answer (DEFAULT_API_LIMITS.maxBodyBytes), since kubectl printed such answers. */
export const MAX_CLUSTER_FILE = 64 << 20;

function readText(path: string): string {
  try {
    const size = statSync(path).size;
    if (size > MAX_CLUSTER_FILE) {
      throw new ClusterFileError(
        `cluster file ${path} is ${size} bytes, more than the ${MAX_CLUSTER_FILE >> 20} MiB ` +
          `clbprobe reads (a saved cluster the API server could answer in one list)`,
      );
    }
    // The size stat gives bounds a regular file; a device or a file still growing is bounded here.
    return readFileBounded(path, MAX_CLUSTER_FILE, 'cluster file').toString('utf8');
  } catch (e) {
    if (e instanceof ClusterFileError) throw e;
    if (e instanceof FileTooLargeError) throw new ClusterFileError(e.message);
    throw new ClusterFileError(`cannot read cluster file ${path}: ${errText(e)}`);
  }
}

function parseText(path: string, text: string) {
  try {
    return classifyDocuments(parseJsonDocuments(text));
  } catch (e) {
    if (e instanceof JsonSyntaxError) {
      throw new ClusterFileError(
        `${path}:${e.line}:${e.column}: not valid JSON: ${e.reason} (want kubectl get ... -o json output)`,
      );
    }
    throw e;
  }
}

/** Reads and classifies a cluster file. Throws ClusterFileError. */
export function readClusterFile(path: string) {
  return parseText(path, readText(path));
}

/** The ClusterView a cluster file describes, as seen from node `opts.nodeName`. Throws ClusterFileError. */
export function loadClusterFile(path: string, opts: Omit<BuildOptions, 'warnings'> = {}): ClusterView {
  const { objects, warnings } = readClusterFile(path);
  return buildClusterView(objects, { ...opts, warnings });
}

/** Re-reads only when the sha256 differs from `since`; `view` is then undefined and the previous view holds. */
export function reloadClusterFile(
  path: string,
  since: string | undefined,
  opts: Omit<BuildOptions, 'warnings'> = {},
): { digest: string; view?: ClusterView } {
  const text = readText(path);
  const digest = createHash('sha256').update(text).digest('hex');
  if (digest === since) return { digest };
  const { objects, warnings } = parseText(path, text);
  return { digest, view: buildClusterView(objects, { ...opts, warnings }) };
}
