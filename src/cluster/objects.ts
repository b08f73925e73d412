// The raw objects the view is built from, each parsed in isolation: a bad object costs one warning, never the view.
import { FieldError, isObj, type Obj, optArr, optObj, optStr, reqStr } from './fields.js';

/** One object as read, with where it came from (e.g. 'items[3]', 'watch') for warnings. */
export interface SourcedObject {
  origin: string;
  object: unknown;
}

export const GATEWAY_KINDS = [
  'gatewayClasses',
  'gateways',
  'httpRoutes',
  'grpcRoutes',
  'tlsRoutes',
  'tcpRoutes',
  'udpRoutes',
  'referenceGrants',
] as const;

export const KINDS = ['services', 'endpointSlices', 'ingresses', 'nodes', ...GATEWAY_KINDS] as const;
export type Kind = (typeof KINDS)[number];

/** A kind's API: group ('' for core), plural resource, and the versions read. */
export interface KindApi {
  kind: string;
  group: string;
  resource: string;
  /** The first is listed and watched; the others, in order, where the one before is not served (404). */
  versions: readonly string[];
  /** A Gateway API kind, which a CRD adds: a 404 is a cluster without it, no error. */
  crd?: true;
  /** The view works without it (Ingress VIPs only add L7 detail): a 403 or 404 leaves it empty with a note. */
  optional?: true;
  /** Only this node's object is watched, and named 'node' in reasons. */
  thisNodeOnly?: true;
}

export const GATEWAY_GROUP = 'gateway.networking.k8s.io';
const gatewayApi = (kind: string, resource: string, ...versions: string[]): KindApi => ({
  kind,
  group: GATEWAY_GROUP,
  resource,
  versions,
  crd: true,
  optional: true,
});

/**
 * EndpointSlices are also read as v1beta1, which 1.17-1.20 serve (v1 since 1.21); each Gateway API kind at every
 * version a release serves it at (e.g. GRPCRoute only v1alpha2 up to Gateway API v1.0, HTTPRoute v1beta1 up to v0.8).
 */
export const KIND_APIS: Record<Kind, KindApi> = {
  services: { kind: 'Service', group: '', resource: 'services', versions: ['v1'] },
  endpointSlices: {
    kind: 'EndpointSlice',
    group: 'discovery.k8s.io',
    resource: 'endpointslices',
    versions: ['v1', 'v1beta1'],
  },
  ingresses: { kind: 'Ingress', group: 'networking.k8s.io', resource: 'ingresses', versions: ['v1'], optional: true },
  nodes: { kind: 'Node', group: '', resource: 'nodes', versions: ['v1'], thisNodeOnly: true },
  gatewayClasses: gatewayApi('GatewayClass', 'gatewayclasses', 'v1', 'v1beta1'),
  gateways: gatewayApi('Gateway', 'gateways', 'v1', 'v1beta1'),
  httpRoutes: gatewayApi('HTTPRoute', 'httproutes', 'v1', 'v1beta1'),
  grpcRoutes: gatewayApi('GRPCRoute', 'grpcroutes', 'v1', 'v1alpha2'),
  tlsRoutes: gatewayApi('TLSRoute', 'tlsroutes', 'v1alpha2', 'v1alpha3', 'v1'),
  tcpRoutes: gatewayApi('TCPRoute', 'tcproutes', 'v1alpha2', 'v1alpha3', 'v1'),
  udpRoutes: gatewayApi('UDPRoute', 'udproutes', 'v1alpha2', 'v1alpha3', 'v1'),
  referenceGrants: gatewayApi('ReferenceGrant', 'referencegrants', 'v1beta1', 'v1'),
};

/** "discovery.k8s.io/v1", or "v1" for the core group. */
export function apiVersionOf(api: KindApi, version = api.versions[0]!): string {
  return api.group ? `${api.group}/${version}` : version;
}

/** The collection's path across namespaces, e.g. /apis/discovery.k8s.io/v1/endpointslices. */
export function collectionPath(api: KindApi, version = api.versions[0]!): string {
  return `${api.group ? '/apis' : '/api'}/${apiVersionOf(api, version)}/${api.resource}`;
}

/** The objects of each kind (a List's items, or the watch stores). */
export type ClusterObjects = Record<Kind, SourcedObject[]>;

export function emptyObjects(): ClusterObjects {
  return Object.fromEntries(KINDS.map((kind) => [kind, []])) as unknown as ClusterObjects;
}

/** What a parser gets besides the object itself. */
export interface ObjectContext {
  namespace: string;
  name: string;
  metadata: Obj;
  /** Adds a warning prefixed with the object's label, for a skipped part (one port, one endpoint). */
  warn(message: string): void;
}

/** An object that parsed with warnings (or was skipped: no value), the warnings in order. */
class Flawed<T> {
  constructor(
    readonly value: T | undefined,
    readonly warnings: readonly string[],
  ) {}
}

/** A parsed object, bare when it had no warning (so no wrapper per object), else a Flawed. */
export type Parsed<T> = T | Flawed<T>;
/** What a parser's objects are once valuesOf took their warnings out. */
export type ValueOf<P extends (s: SourcedObject) => unknown> = Exclude<ReturnType<P>, Flawed<unknown>>;

const NO_WARNINGS: readonly string[] = Object.freeze([]);

/** Parses one object, skipping an invalid one with a warning; no namespace means 'default' as in kubectl. */
export function parseOne<T>(
  { origin, object }: SourcedObject,
  kind: string,
  namespaced: boolean,
  parse: (o: Obj, ctx: ObjectContext) => T,
): Parsed<T> {
  let warnings: string[] | undefined;
  const warn = (m: string): void => {
    warnings ??= [];
    warnings.push(m);
  };
  let label = `${origin} (${kind})`;
  try {
    if (!isObj(object)) throw new FieldError('not an object');
    const metadata = optObj(object.metadata, 'metadata');
    if (!metadata) throw new FieldError('metadata is missing');
    const name = reqStr(metadata.name, 'metadata.name');
    const namespace = namespaced ? optStr(metadata.namespace, 'metadata.namespace') || 'default' : '';
    label = `${origin} (${kind} ${namespaced ? `${namespace}/` : ''}${name})`;
    const prefix = label;
    const value = parse(object, { namespace, name, metadata, warn: (m) => warn(`${prefix}: ${m}`) });
    return warnings ? new Flawed(value, warnings) : value;
  } catch (e) {
    warn(`${label}: ${e instanceof FieldError ? e.message : `unexpected shape (${String(e)})`}`);
    return new Flawed<T>(undefined, warnings ?? NO_WARNINGS);
  }
}

/** The values of parsed objects, their warnings appended to `warnings` in order. */
export function valuesOf<T>(parsed: Iterable<Parsed<T>>, warnings: string[]): T[] {
  const out: T[] = [];
  for (const p of parsed) {
    if (p instanceof Flawed) {
      warnings.push(...p.warnings);
      if (p.value !== undefined) out.push(p.value);
    } else if (p !== undefined) out.push(p);
  }
  return out;
}

/** Parses each element of a list field (absent: none), skipping bad ones with a warning. */
export function parseParts<T>(
  list: unknown,
  path: string,
  warn: (m: string) => void,
  parse: (item: unknown, path: string) => T,
): T[] {
  const out: T[] = [];
  optArr(list, path).forEach((item, i) => {
    try {
      out.push(parse(item, `${path}[${i}]`));
    } catch (e) {
      if (!(e instanceof FieldError)) throw e;
      warn(e.message);
    }
  });
  return compact(out);
}

/** Appends `value` to the list at `key`, starting one when there is none. */
export function pushTo<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** A bounded table of shared values by key: emptied when full (the values handed out stay shared). */
export class Interned<T> {
  private readonly values = new Map<string, T>();

  constructor(private readonly max: number) {}

  get(key: string, make: () => T): T {
    const known = this.values.get(key);
    if (known !== undefined) return known;
    if (this.values.size >= this.max) this.values.clear();
    const value = make();
    this.values.set(key, value);
    return value;
  }
}

/** A list built by push, copied at its exact size: push leaves spare room, and the view holds many small lists. */
export function compact<T>(list: T[]): T[] {
  return list.length === 0 ? [] : list.slice();
}
