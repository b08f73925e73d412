// EndpointSlices (v1; v1beta1 on 1.17-1.20, node in topology["kubernetes.io/hostname"]) → endpoints per Service port.
// Slices join by the `kubernetes.io/service-name` label and ports by name+protocol like kube-proxy; nil ready = ready.
import { canonicalIp, FieldError, isObj, optArr, optBool, optInt, optObj, optStr, reqStr, strMap } from './fields.js';
import { compact, Interned, type Parsed, parseOne, parseParts, pushTo, type SourcedObject } from './objects.js';
import type { EndpointPorts, EndpointView, ServiceView } from './types.js';

const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
const HOSTNAME_TOPOLOGY_KEY = 'kubernetes.io/hostname';
/** Who wrote a slice; only the endpointslice controller derives it from the Service's own selector. */
const MANAGED_BY_LABEL = 'endpointslice.kubernetes.io/managed-by';
const ENDPOINTSLICE_CONTROLLER = 'endpointslice-controller.k8s.io';

/** One port of a slice: the ServicePort it serves (by name and protocol) and its number there. */
type SlicePort = ReturnType<typeof parseSlicePort>;

/** A slice with its Service; its endpoint objects are shared by the view, the watch store and every port. */
export interface SliceEntry {
  namespace: string;
  service: string;
  ports: SlicePort[];
  endpoints: EndpointView[];
  /** False when the endpointslice controller did not write the slice: such a slice can name any address. */
  managed: boolean;
}

/** Port lists (frozen) and node names shared by one watch's slices instead of a copy per slice. */
export class SliceTables {
  private readonly portLists = new Interned<SlicePort[]>(256);
  /** Up to 16,384 nodes: the largest clusters have ~15k. */
  private readonly nodeNames = new Interned<string>(16_384);

  ports(ports: SlicePort[]): SlicePort[] {
    return this.portLists.get(
      JSON.stringify(ports),
      () => Object.freeze(ports.map((p) => Object.freeze(p))) as SlicePort[],
    );
  }

  nodeName(name: string): string {
    return this.nodeNames.get(name, () => name);
  }
}

/** One EndpointSlice, or none for slices of no Service or FQDN addresses; `nodeName` marks endpoints local. */
export function parseEndpointSlice(
  sourced: SourcedObject,
  nodeName?: string,
  tables = new SliceTables(),
): Parsed<SliceEntry | undefined> {
  return parseOne(sourced, 'EndpointSlice', true, (raw, ctx) => {
    const labels = strMap(ctx.metadata.labels, 'metadata.labels');
    const service = labels[SERVICE_NAME_LABEL];
    // Slices not managed for a Service (e.g. mirrored custom ones without the label) have no owner here.
    if (!service) return undefined;
    const addressType = reqStr(raw.addressType, 'addressType');
    if (addressType === 'FQDN') return undefined;
    if (addressType !== 'IPv4' && addressType !== 'IPv6')
      throw new FieldError(`addressType ${JSON.stringify(addressType)} is unknown`);
    const ports = parseParts(raw.ports, 'ports', ctx.warn, parseSlicePort);
    const endpoints = parseParts(raw.endpoints, 'endpoints', ctx.warn, (v, path) =>
      parseEndpoint(v, path, tables, nodeName),
    );
    return {
      namespace: ctx.namespace,
      service,
      ports: tables.ports(ports),
      endpoints,
      managed: labels[MANAGED_BY_LABEL] === ENDPOINTSLICE_CONTROLLER,
    };
  });
}

/** Slices by "namespace/serviceName". */
export function indexEndpointSlices(entries: readonly (SliceEntry | undefined)[]) {
  const index = new Map<string, SliceEntry[]>();
  for (const p of entries) if (p) pushTo(index, `${p.namespace}/${p.service}`, p);
  return index;
}

/** Undefined port means "all ports" in the API. */
function parseSlicePort(value: unknown, path: string) {
  if (!isObj(value)) throw new FieldError(`${path} is not an object`);
  return {
    name: optStr(value.name, `${path}.name`) ?? '',
    protocol: optStr(value.protocol, `${path}.protocol`) ?? 'TCP',
    port: optInt(value.port, `${path}.port`, 0, 65535),
  };
}

/** All fields in one literal, in one order, so every endpoint has the same object shape; `local` when on `thisNode`. */
function parseEndpoint(value: unknown, path: string, tables: SliceTables, thisNode: string | undefined): EndpointView {
  if (!isObj(value)) throw new FieldError(`${path} is not an object`);
  const addresses = optArr(value.addresses, `${path}.addresses`);
  // kube-proxy uses the first address; the others are fungible by API contract.
  if (addresses.length === 0) throw new FieldError(`${path}.addresses is empty`);
  const conditions = optObj(value.conditions, `${path}.conditions`) ?? {};
  // As kube-proxy reads them: ready and serving unless false, terminating only when true.
  const ready = optBool(conditions.ready, `${path}.conditions.ready`) ?? true;
  const serving = optBool(conditions.serving, `${path}.conditions.serving`) ?? true;
  const terminating = optBool(conditions.terminating, `${path}.conditions.terminating`) ?? false;
  const nodeName =
    optStr(value.nodeName, `${path}.nodeName`) ||
    strMap(value.topology, `${path}.topology`)[HOSTNAME_TOPOLOGY_KEY] ||
    undefined;
  return {
    address: canonicalIp(addresses[0], `${path}.addresses[0]`),
    nodeName: nodeName === undefined ? undefined : tables.nodeName(nodeName),
    ready,
    local: thisNode !== undefined && nodeName === thisNode,
    servingTerminating: serving && terminating ? true : undefined,
  };
}

/**
 * Whether kube-proxy has a local endpoint for ETP=Local traffic: a ready one, else one serving while it terminates
 * (its fallback since 1.26, pkg/proxy/topology.go CategorizeEndpoints), as during a rollout of the node's only pod.
 */
export function usableLocally(endpoints: readonly EndpointView[]): boolean {
  return endpoints.some((e) => e.local && (e.ready || e.servingTerminating === true));
}

/** The EndpointSlice port number of one of `s.endpoints` (undefined: the slice's port has none). */
export function slicePort(service: Pick<ServiceView, 'endpointPorts'>, ep: EndpointView): number | undefined {
  const p = service.endpointPorts;
  return typeof p === 'object' ? p.get(ep) : p;
}

/** Endpoints of one ServicePort across its slices, once per address+port; a single slice's list is shared as is. */
export function endpointsFor(
  index: ReturnType<typeof indexEndpointSlices>,
  namespace: string,
  service: string,
  portName: string,
  protocol: string,
): { endpoints: EndpointView[]; ports: EndpointPorts; unmanaged: boolean } {
  const slices: { endpoints: EndpointView[]; port: number | undefined }[] = [];
  let unmanaged = false;
  for (const slice of index.get(`${namespace}/${service}`) ?? []) {
    const port = slice.ports.find((p) => p.name === portName && p.protocol === protocol);
    if (!port || slice.endpoints.length === 0) continue;
    slices.push({ endpoints: slice.endpoints, port: port.port });
    unmanaged ||= !slice.managed;
  }
  const first = slices[0];
  if (first === undefined) return { endpoints: [], ports: undefined, unmanaged };
  if (slices.length === 1) return { endpoints: first.endpoints, ports: first.port, unmanaged };
  // During updates one address can sit in two slices; keep the first.
  const seen = new Set<string>();
  const out: EndpointView[] = [];
  const byEndpoint = new Map<EndpointView, number | undefined>();
  for (const { endpoints, port } of slices) {
    for (const ep of endpoints) {
      const key = `${ep.address}|${port ?? ''}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push(ep);
      byEndpoint.set(ep, port);
    }
  }
  // Slices of one Service usually give a port the same number: then one number says it.
  const uniform = slices.every((s) => s.port === first.port);
  return { endpoints: compact(out), ports: uniform ? first.port : byEndpoint, unmanaged };
}
