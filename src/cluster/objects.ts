// The raw Kubernetes objects the cluster view is built from, and the loop that
// parses each one in isolation: a bad object costs one warning naming it
// ("items[3] (Service default/x): spec.ports[0].port is not a number"), never the view.
import { FieldError, isObj, optObj, optStr, reqStr, type Obj } from './fields.js';

/** One object as read, with where it came from (e.g. 'items[3]', 'watch') for warnings. */
export interface SourcedObject {
  origin: string;
  object: unknown;
}

/** The four kinds the view needs, already sorted by kind (a List's items, or the watch stores). */
export interface ClusterObjects {
  services: SourcedObject[];
  endpointSlices: SourcedObject[];
  ingresses: SourcedObject[];
  nodes: SourcedObject[];
}

export function emptyObjects(): ClusterObjects {
  return { services: [], endpointSlices: [], ingresses: [], nodes: [] };
}

/** What a parser gets besides the object itself. */
export interface ObjectContext {
  namespace: string;
  name: string;
  metadata: Obj;
  /** Adds a warning prefixed with the object's label, for a skipped part (one port, one endpoint). */
  warn(message: string): void;
}

/**
 * Runs `parse` on every object of one kind; objects that are not objects, have
 * no metadata.name, or make `parse` throw are skipped with a warning.
 * `namespaced` objects without metadata.namespace are taken as in 'default',
 * as kubectl does.
 */
export function parseEach<T>(
  list: readonly SourcedObject[],
  kind: string,
  namespaced: boolean,
  warnings: string[],
  parse: (o: Obj, ctx: ObjectContext) => T,
): T[] {
  const out: T[] = [];
  for (const { origin, object } of list) {
    let label = `${origin} (${kind})`;
    try {
      if (!isObj(object)) throw new FieldError('not an object');
      const metadata = optObj(object.metadata, 'metadata');
      if (!metadata) throw new FieldError('metadata is missing');
      const name = reqStr(metadata.name, 'metadata.name');
      const namespace = namespaced ? (optStr(metadata.namespace, 'metadata.namespace') || 'default') : '';
      label = `${origin} (${kind} ${namespaced ? `${namespace}/` : ''}${name})`;
      const prefix = label;
      out.push(parse(object, { namespace, name, metadata, warn: (m) => warnings.push(`${prefix}: ${m}`) }));
    } catch (e) {
      warnings.push(`${label}: ${e instanceof FieldError ? e.message : `unexpected shape (${String(e)})`}`);
    }
  }
  return out;
}

/**
 * Parses each element of a list field; a bad element is skipped with a
 * warning, the rest are kept (a Service with one bad port keeps its others).
 */
export function parseParts<T>(
  items: unknown[],
  path: string,
  warn: (m: string) => void,
  parse: (item: unknown, path: string) => T,
): T[] {
  const out: T[] = [];
  items.forEach((item, i) => {
    try {
      out.push(parse(item, `${path}[${i}]`));
    } catch (e) {
      if (!(e instanceof FieldError)) throw e;
      warn(e.message);
    }
  });
  return out;
}
