// EndpointSlices (discovery.k8s.io/v1) → endpoints per Service port.
// A slice belongs to the Service named by its `kubernetes.io/service-name`
// label in its namespace; its ports are matched to a ServicePort by name and
// protocol, as kube-proxy does. Condition defaults follow the API docs:
// ready nil → true, serving nil → ready, terminating nil → false.
import { canonicalIp, FieldError, isObj, optArr, optBool, optInt, optObj, optStr, reqStr, strMap } from './fields.js';
import { compact, parseOne, parseParts, type Parsed, type SourcedObject } from './objects.js';
import type { EndpointView } from './types.js';

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

interface SlicePort {
  name: string;
  protocol: string;
  /** Undefined means "all ports" in the API. */
  port?: number;
}

type SliceEndpoint = Omit<EndpointView, 'local' | 'port'>;

interface Slice {
  ports: SlicePort[];
  endpoints: SliceEndpoint[];
}

/** Slices by "namespace/serviceName". */
export type EndpointIndex = Map<string, Slice[]>;

/** A slice as the view uses it, with the Service it belongs to ("namespace/serviceName"). */
export interface SliceEntry {
  key: string;
  slice: Slice;
}

/** One EndpointSlice; no value for slices of no Service or of FQDN addresses. */
export function parseEndpointSlice(s: SourcedObject): Parsed<SliceEntry | undefined> {
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
    return { key: `${ctx.namespace}/${service}`, slice: { ports, endpoints } };
  });
}

export function indexEndpointSlices(entries: readonly (SliceEntry | undefined)[]): EndpointIndex {
  const index: EndpointIndex = new Map();
  for (const p of entries) {
    if (!p) continue;
    const slices = index.get(p.key);
    if (slices) slices.push(p.slice);
    else index.set(p.key, [p.slice]);
  }
  return index;
}

function parseSlicePort(v: unknown, path: string): SlicePort {
  if (!isObj(v)) throw new FieldError(`${path} is not an object`);
  return {
    name: optStr(v.name, `${path}.name`) ?? '',
    protocol: optStr(v.protocol, `${path}.protocol`) ?? 'TCP',
    port: optInt(v.port, `${path}.port`, 0, 65535),
  };
}

function parseEndpoint(v: unknown, path: string): SliceEndpoint {
  if (!isObj(v)) throw new FieldError(`${path} is not an object`);
  const addresses = optArr(v.addresses, `${path}.addresses`);
  // kube-proxy uses the first address; the others are fungible by API contract.
  if (addresses.length === 0) throw new FieldError(`${path}.addresses is empty`);
  const conditions = optObj(v.conditions, `${path}.conditions`) ?? {};
  const ready = optBool(conditions.ready, `${path}.conditions.ready`) ?? true;
  // All fields in one literal, in one order: every endpoint gets the same object shape with its
  // fields in the object (fields added later go to a separate store: ~1 MB more at 20k endpoints).
  return {
    address: canonicalIp(addresses[0], `${path}.addresses[0]`),
    nodeName: optStr(v.nodeName, `${path}.nodeName`) || undefined,
    ready,
    serving: optBool(conditions.serving, `${path}.conditions.serving`) ?? ready,
    terminating: optBool(conditions.terminating, `${path}.conditions.terminating`) ?? false,
  };
}

/**
 * Endpoints of one ServicePort: every endpoint of every slice of the Service
 * whose port list has that port name and protocol, once per address+port.
 */
export function endpointsFor(
  index: EndpointIndex,
  namespace: string,
  service: string,
  portName: string,
  protocol: string,
  nodeName: string | undefined,
): EndpointView[] {
  const out: EndpointView[] = [];
  const slices = index.get(`${namespace}/${service}`) ?? [];
  // During updates one address can sit in two slices; keep the first. (One slice needs no check.)
  const seen = slices.length > 1 ? new Set<string>() : undefined;
  for (const slice of slices) {
    const port = slice.ports.find((p) => p.name === portName && p.protocol === protocol);
    if (!port) continue;
    for (const ep of slice.endpoints) {
      if (seen) {
        const key = `${ep.address}|${port.port ?? ''}`;
        if (seen.has(key)) continue;
        seen.add(key);
      }
      const view: EndpointView = {
        address: ep.address,
        nodeName: ep.nodeName,
        ready: ep.ready,
        serving: ep.serving,
        terminating: ep.terminating,
        local: nodeName !== undefined && ep.nodeName === nodeName,
        port: port.port,
      };
      out.push(view);
    }
  }
  return compact(out);
}
