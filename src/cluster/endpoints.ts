// EndpointSlices (discovery.k8s.io/v1, and v1beta1 as 1.17-1.20 serve them) → endpoints per Service port.
// A slice belongs to the Service named by its `kubernetes.io/service-name`
// label in its namespace; its ports are matched to a ServicePort by name and
// protocol, as kube-proxy does. A nil ready condition means ready (the API docs).
// v1beta1 puts an endpoint's node in topology["kubernetes.io/hostname"] (its nodeName field
// needs an alpha gate in 1.20); kube-proxy 1.20 compares that label with its own node name.
import { canonicalIp, FieldError, isObj, optArr, optBool, optInt, optObj, optStr, reqStr, strMap } from './fields.js';
import { compact, parseOne, parseParts, type Parsed, type SourcedObject } from './objects.js';
import type { EndpointView } from './types.js';

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
export const HOSTNAME_TOPOLOGY_KEY = 'kubernetes.io/hostname';

/**
 * One port of a slice with the slice's endpoints as that port's EndpointViews. The views are
 * made here, once per object, so that a Service port served by one slice (the usual case) uses
 * this list as it is: rebuilding the view after an event makes no endpoint objects, and the
 * view and the watch store share one object per endpoint and port (at 20k endpoints, a second
 * set would be ~2 MB of the agent's heap, bench/agent.ts).
 */
interface SlicePort {
  name: string;
  protocol: string;
  endpoints: EndpointView[];
}

/** A slice as the view uses it, with the Service it belongs to (kept apart: a joined key is a second string). */
export interface SliceEntry {
  namespace: string;
  service: string;
  ports: SlicePort[];
}

/** Slices by "namespace/serviceName". */
export type EndpointIndex = Map<string, SliceEntry[]>;

/**
 * One EndpointSlice; no value for slices of no Service or of FQDN addresses. `nodeName` is this
 * node's: endpoints on it are `local` (the agent's node does not change while it runs).
 */
export function parseEndpointSlice(s: SourcedObject, nodeName?: string): Parsed<SliceEntry | undefined> {
  return parseOne(s, 'EndpointSlice', true, (o, ctx) => {
    const labels = strMap(ctx.metadata.labels, 'metadata.labels');
    const service = labels[SERVICE_NAME_LABEL];
    // Slices not managed for a Service (e.g. mirrored custom ones without the label) have no owner here.
    if (!service) return undefined;
    const addressType = reqStr(o.addressType, 'addressType');
    if (addressType === 'FQDN') return undefined;
    if (addressType !== 'IPv4' && addressType !== 'IPv6') throw new FieldError(`addressType ${JSON.stringify(addressType)} is unknown`);
    const ports = parseParts(optArr(o.ports, 'ports'), 'ports', ctx.warn, parseSlicePort);
    const endpoints = parseParts(optArr(o.endpoints, 'endpoints'), 'endpoints', ctx.warn, parseEndpoint);
    return {
      namespace: ctx.namespace,
      service,
      ports: ports.map((p) => ({ name: p.name, protocol: p.protocol, endpoints: endpoints.map((ep) => endpointView(ep, p.port, nodeName)) })),
    };
  });
}

export function indexEndpointSlices(entries: readonly (SliceEntry | undefined)[]): EndpointIndex {
  const index: EndpointIndex = new Map();
  for (const p of entries) {
    if (!p) continue;
    const key = `${p.namespace}/${p.service}`;
    const slices = index.get(key);
    if (slices) slices.push(p);
    else index.set(key, [p]);
  }
  return index;
}

/** Undefined port means "all ports" in the API. */
function parseSlicePort(v: unknown, path: string): { name: string; protocol: string; port?: number } {
  if (!isObj(v)) throw new FieldError(`${path} is not an object`);
  return {
    name: optStr(v.name, `${path}.name`) ?? '',
    protocol: optStr(v.protocol, `${path}.protocol`) ?? 'TCP',
    port: optInt(v.port, `${path}.port`, 0, 65535),
  };
}

type SliceEndpoint = Omit<EndpointView, 'local' | 'port'>;

function parseEndpoint(v: unknown, path: string): SliceEndpoint {
  if (!isObj(v)) throw new FieldError(`${path} is not an object`);
  const addresses = optArr(v.addresses, `${path}.addresses`);
  // kube-proxy uses the first address; the others are fungible by API contract.
  if (addresses.length === 0) throw new FieldError(`${path}.addresses is empty`);
  const conditions = optObj(v.conditions, `${path}.conditions`) ?? {};
  const ready = optBool(conditions.ready, `${path}.conditions.ready`) ?? true;
  const nodeName = optStr(v.nodeName, `${path}.nodeName`) || strMap(v.topology, `${path}.topology`)[HOSTNAME_TOPOLOGY_KEY] || undefined;
  return {
    address: canonicalIp(addresses[0], `${path}.addresses[0]`),
    nodeName,
    ready,
  };
}

/**
 * All fields in one literal, in one order: every endpoint gets the same object shape with its
 * fields in the object (fields added later go to a separate store: ~1 MB more at 20k endpoints).
 */
function endpointView(ep: SliceEndpoint, port: number | undefined, nodeName: string | undefined): EndpointView {
  return {
    address: ep.address,
    nodeName: ep.nodeName,
    ready: ep.ready,
    local: nodeName !== undefined && ep.nodeName === nodeName,
    port,
  };
}

/**
 * Endpoints of one ServicePort: every endpoint of every slice of the Service
 * whose port list has that port name and protocol, once per address+port.
 * With one such slice, that slice's list itself (shared, never modified).
 */
export function endpointsFor(index: EndpointIndex, namespace: string, service: string, portName: string, protocol: string): EndpointView[] {
  const lists: EndpointView[][] = [];
  for (const slice of index.get(`${namespace}/${service}`) ?? []) {
    const port = slice.ports.find((p) => p.name === portName && p.protocol === protocol);
    if (port && port.endpoints.length > 0) lists.push(port.endpoints);
  }
  if (lists.length <= 1) return lists[0] ?? [];
  // During updates one address can sit in two slices; keep the first.
  const seen = new Set<string>();
  const out: EndpointView[] = [];
  for (const list of lists) {
    for (const ep of list) {
      const key = `${ep.address}|${ep.port ?? ''}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push(ep);
    }
  }
  return compact(out);
}
