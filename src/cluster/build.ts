// Kubernetes objects + this node's name → the ClusterView the detectors read; pure, bad objects become warnings.
import { byText } from '../compare.js';
import { interpretAnnotations, isInternalLb } from './annotations.js';
import { endpointsFor, indexEndpointSlices, parseEndpointSlice, SliceTables } from './endpoints.js';
import {
  canonicalIp,
  dnsName,
  FieldError,
  isObj,
  type Obj,
  optInt,
  optObj,
  optStr,
  reqStr,
  strArr,
  strMap,
} from './fields.js';
import {
  gatewayVipsFor,
  indexGateways,
  parseGateway,
  parseGatewayClass,
  parseReferenceGrant,
  routeParser,
} from './gateway.js';
import { indexIngresses, ingressVipsFor, parseIngress } from './ingress.js';
import {
  type ClusterObjects,
  compact,
  GATEWAY_KINDS,
  KINDS,
  type Kind,
  parseOne,
  parseParts,
  type SourcedObject,
  type ValueOf,
  valuesOf,
} from './objects.js';
import type {
  ClusterView,
  EndpointPorts,
  EndpointView,
  LbIngressIp,
  NodeView,
  ServiceView,
  TrafficPolicy,
} from './types.js';

export interface BuildOptions {
  /** This node's name (spec.nodeName of its pods); endpoints on it are `local`. */
  nodeName?: string;
  /** When the objects were known complete; defaults to none. */
  syncedAt?: string;
  /** Defaults to true; the watcher passes false with a reason while the API is away. */
  fresh?: boolean;
  staleReason?: string;
  /** Warnings of the reader that produced the objects, listed first. */
  warnings?: string[];
}

const SERVICE_TYPES = ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'] as const;
const PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;

/** Empty Gateway API kinds, for a view built without them. */
export const NO_GATEWAY_API = Object.fromEntries(GATEWAY_KINDS.map((kind) => [kind, []])) as unknown as {
  [K in (typeof GATEWAY_KINDS)[number]]: [];
};

/** The route kinds' buckets, in the order their warnings are listed. */
const ROUTE_BUCKETS = ['httpRoutes', 'grpcRoutes', 'tlsRoutes', 'tcpRoutes', 'udpRoutes'] as const;

type Parsers = ReturnType<typeof parsersFor>;
/** The kinds, each object parsed on its own: what the watch keeps of each object. */
export type ParsedObjects = { [K in Kind]: Iterable<ReturnType<Parsers[K]>> };

/** Per-kind parsers; `nodeName` marks endpoints local, so assemble with the same one. */
export function parsersFor(nodeName: string | undefined) {
  const sliceTables = new SliceTables();
  return {
    services: (s) =>
      parseOne(s, 'Service', true, (o, ctx) => ({
        namespace: ctx.namespace,
        name: ctx.name,
        spec: parseServiceSpec(o, ctx.metadata, ctx.warn),
        ports: parseParts(optObj(o.spec, 'spec')?.ports, 'spec.ports', ctx.warn, parseServicePort),
      })),
    endpointSlices: (s) => parseEndpointSlice(s, nodeName, sliceTables),
    ingresses: parseIngress,
    nodes: (s) => parseOne(s, 'Node', false, parseNode),
    gatewayClasses: parseGatewayClass,
    gateways: parseGateway,
    httpRoutes: routeParser('HTTPRoute'),
    grpcRoutes: routeParser('GRPCRoute'),
    tlsRoutes: routeParser('TLSRoute'),
    tcpRoutes: routeParser('TCPRoute'),
    udpRoutes: routeParser('UDPRoute'),
    referenceGrants: parseReferenceGrant,
  } satisfies Record<Kind, (s: SourcedObject) => unknown>;
}

export function buildClusterView(objects: ClusterObjects, opts: BuildOptions = {}): ClusterView {
  const parse = parsersFor(opts.nodeName);
  const parsed = Object.fromEntries(
    KINDS.map((kind) => [kind, objects[kind].map(parse[kind] as (s: SourcedObject) => unknown)]),
  );
  return assembleClusterView(parsed as unknown as ParsedObjects, opts);
}

/** The view from objects parsed by `parsersFor(opts.nodeName)`; warnings by kind: slices first, Node last. */
export function assembleClusterView(parsed: ParsedObjects, opts: BuildOptions = {}): ClusterView {
  const warnings = [...(opts.warnings ?? [])];
  const endpoints = indexEndpointSlices(valuesOf(parsed.endpointSlices, warnings));
  const ingresses = indexIngresses(valuesOf(parsed.ingresses, warnings));
  const gateways = indexGateways({
    classes: valuesOf(parsed.gatewayClasses, warnings),
    gateways: valuesOf(parsed.gateways, warnings),
    routes: ROUTE_BUCKETS.flatMap((b) => valuesOf(parsed[b], warnings)),
    grants: valuesOf(parsed.referenceGrants, warnings),
  });
  const services: ServiceView[] = [];
  for (const svc of valuesOf(parsed.services, warnings)) {
    for (const port of svc.ports) {
      const ingressVips = ingressVipsFor(ingresses, svc.namespace, svc.name, port.port, port.portName);
      const gateway = gateways.size > 0 ? gatewayVipsFor(gateways, svc.namespace, svc.name, port.port) : undefined;
      const l7Vips = gateway && gateway.vips.length > 0 ? [...ingressVips, ...gateway.vips] : ingressVips;
      const eps = endpointsFor(endpoints, svc.namespace, svc.name, port.portName, port.protocol);
      const view = serviceView(svc, port, orNone(l7Vips), orNone(eps.endpoints), eps.ports, eps.unmanaged);
      if (gateway && gateway.hostnames.length > 0) view.gatewayHostnames = gateway.hostnames;
      services.push(view);
    }
  }
  // Watch stores hold objects in arrival order; the view is ordered so that equal states compare equal.
  services.sort((a, b) => byText(a.namespace, b.namespace) || byText(a.name, b.name));

  const view: ClusterView = { fresh: opts.fresh ?? true, services, warnings };
  if (opts.syncedAt !== undefined) view.syncedAt = opts.syncedAt;
  if (opts.staleReason !== undefined) view.staleReason = opts.staleReason;
  if (opts.nodeName !== undefined) {
    view.nodeName = opts.nodeName;
    const node = valuesOf(parsed.nodes, warnings).find((n) => n.name === opts.nodeName);
    if (node) view.node = node;
    else warnings.push(`node ${JSON.stringify(opts.nodeName)} not found: its addresses and pod CIDRs are unknown`);
  }
  return view;
}

/** One literal with every field, in JSON output's order, so every ServiceView has the same object shape. */
function serviceView(
  svc: ValueOf<Parsers['services']>,
  port: ReturnType<typeof parseServicePort>,
  ingressVips: ServiceView['ingressVips'],
  endpoints: EndpointView[],
  endpointPorts: EndpointPorts,
  unmanagedEndpoints: boolean,
): ServiceView {
  const { spec } = svc;
  return {
    namespace: svc.namespace,
    name: svc.name,
    portName: port.portName,
    protocol: port.protocol,
    port: port.port,
    targetPort: port.targetPort,
    nodePort: port.nodePort,
    type: spec.type,
    clusterIPs: spec.clusterIPs,
    lbIngress: spec.lbIngress,
    externalIPs: spec.externalIPs,
    externalTrafficPolicy: spec.externalTrafficPolicy,
    internalTrafficPolicy: spec.internalTrafficPolicy,
    annotations: spec.annotations,
    internalLb: spec.internalLb,
    lbHostnames: spec.lbHostnames,
    chosenLbHostnames: spec.chosenLbHostnames,
    lbHostnameLookups: undefined,
    healthCheckNodePort: spec.healthCheckNodePort,
    loadBalancerClass: spec.loadBalancerClass,
    ingressVips,
    gatewayHostnames: undefined,
    endpoints,
    endpointPorts,
    unmanagedEndpoints: unmanagedEndpoints || undefined,
  };
}

/** One shared empty list for the many Service ports without Ingress VIPs or external IPs; frozen. */
const NONE: never[] = Object.freeze([]) as never[];

/** The element of `list` equal to `value`: the interned constant rather than a copy parsed from JSON. */
function constant<T extends string>(list: readonly T[], value: string): T | undefined {
  return list.find((x) => x === value);
}

function parseServicePort(raw: unknown, path: string) {
  if (!isObj(raw)) throw new FieldError(`${path} is not an object`);
  const port = optInt(raw.port, `${path}.port`, 1, 65535);
  if (port === undefined) throw new FieldError(`${path}.port is missing`);
  const text = optStr(raw.protocol, `${path}.protocol`) ?? 'TCP';
  const protocol = constant(PROTOCOLS, text);
  if (!protocol) throw new FieldError(`${path}.protocol ${JSON.stringify(text)} is unknown`);
  const target = raw.targetPort;
  // One literal with every field (absent ones undefined), so every port has the same object shape.
  return {
    portName: optStr(raw.name, `${path}.name`) ?? '',
    protocol,
    port,
    targetPort:
      typeof target === 'string' && target !== '' ? target : (optInt(target, `${path}.targetPort`, 1, 65535) ?? port),
    nodePort: optInt(raw.nodePort, `${path}.nodePort`, 1, 65535),
  };
}

/** The parts of a ServiceView shared by all its ports. */
function parseServiceSpec(raw: Obj, metadata: Obj, warn: (m: string) => void) {
  const spec = optObj(raw.spec, 'spec') ?? {};
  const typeText = optStr(spec.type, 'spec.type') ?? 'ClusterIP';
  const type = constant(SERVICE_TYPES, typeText);
  if (!type) throw new FieldError(`spec.type ${JSON.stringify(typeText)} is unknown`);

  const clusterIPs = pluralOrSingle(spec, 'clusterIPs', 'clusterIP');

  const allAnnotations = strMap(metadata.annotations, 'metadata.annotations');
  const annotations = interpretAnnotations(allAnnotations);
  const { ips: lbIngress, hostnames } = parseLbStatus(raw, warn);
  const chosen = chosenHostnames(hostnames, allAnnotations);
  return {
    type,
    // 'None' marks a headless Service: there is no VIP to track.
    clusterIPs: parseParts(
      clusterIPs.filter((ip) => ip !== 'None'),
      'spec.clusterIPs',
      warn,
      canonicalIp,
    ),
    lbIngress,
    externalIPs: orNone(
      parseParts(strArr(spec.externalIPs, 'spec.externalIPs'), 'spec.externalIPs', warn, canonicalIp),
    ),
    externalTrafficPolicy: trafficPolicy(spec.externalTrafficPolicy, 'spec.externalTrafficPolicy'),
    internalTrafficPolicy: trafficPolicy(spec.internalTrafficPolicy, 'spec.internalTrafficPolicy'),
    annotations,
    internalLb: isInternalLb(annotations, lbIngress),
    // As in parseServicePort: every field in the literal.
    lbHostnames: hostnames.length > 0 ? hostnames : undefined,
    chosenLbHostnames: chosen.length > 0 ? chosen : undefined,
    healthCheckNodePort: optInt(spec.healthCheckNodePort, 'spec.healthCheckNodePort', 1, 65535),
    loadBalancerClass: optStr(spec.loadBalancerClass, 'spec.loadBalancerClass') || undefined,
  };
}

/** Status hostnames named by any annotation: the CCM copies a user-chosen name into the status verbatim. */
function chosenHostnames(hostnames: string[], annotations: Record<string, string>): string[] {
  if (hostnames.length === 0) return [];
  const named = new Set<string>();
  for (const value of Object.values(annotations))
    for (const word of value.split(/[\s,]+/)) if (word) named.add(dnsName(word));
  return hostnames.filter((h) => named.has(dnsName(h)));
}

/** The dual-stack list field, else its single-value predecessor, which older API servers fill alone. */
function pluralOrSingle(spec: Obj, plural: string, single: string): string[] {
  const list = strArr(spec[plural], `spec.${plural}`);
  const one = optStr(spec[single], `spec.${single}`);
  if (list.length === 0 && one) list.push(one);
  return list;
}

const orNone = <T>(list: T[]): T[] => (list.length > 0 ? list : NONE);

function trafficPolicy(v: unknown, path: string): TrafficPolicy {
  const s = optStr(v, path);
  if (s === undefined || s === '' || s === 'Cluster') return 'Cluster';
  if (s === 'Local') return 'Local';
  throw new FieldError(`${path} ${JSON.stringify(s)} is unknown`);
}

/** status.loadBalancer.ingress: IP entries (ipMode defaults to VIP) and hostname-only entries. */
function parseLbStatus(raw: Obj, warn: (m: string) => void): { ips: LbIngressIp[]; hostnames: string[] } {
  const lb = optObj(optObj(raw.status, 'status')?.loadBalancer, 'status.loadBalancer');
  const ips: LbIngressIp[] = [];
  const hostnames: string[] = [];
  parseParts(lb?.ingress, 'status.loadBalancer.ingress', warn, (e, path) => {
    if (!isObj(e)) throw new FieldError(`${path} is not an object`);
    const hostname = optStr(e.hostname, `${path}.hostname`);
    if (e.ip === undefined || e.ip === null || e.ip === '') {
      if (hostname) hostnames.push(hostname);
      return;
    }
    const mode = optStr(e.ipMode, `${path}.ipMode`) ?? 'VIP';
    if (mode !== 'VIP' && mode !== 'Proxy') throw new FieldError(`${path}.ipMode ${JSON.stringify(mode)} is unknown`);
    ips.push({ ip: canonicalIp(e.ip, `${path}.ip`), ipMode: mode, hostname: hostname || undefined });
  });
  return { ips: orNone(compact(ips)), hostnames };
}

function parseNode(node: Obj, ctx: { name: string; warn: (m: string) => void }): NodeView {
  const spec = optObj(node.spec, 'spec') ?? {};
  const podCIDRs = pluralOrSingle(spec, 'podCIDRs', 'podCIDR');
  const addresses = parseParts(optObj(node.status, 'status')?.addresses, 'status.addresses', ctx.warn, (a, path) => {
    if (!isObj(a)) throw new FieldError(`${path} is not an object`);
    const type = reqStr(a.type, `${path}.type`);
    const raw = reqStr(a.address, `${path}.address`);
    // Hostname / DNS entries are names, the IP types are addresses to compare with the kernel's.
    const address = type.endsWith('IP') ? canonicalIp(raw, `${path}.address`) : raw;
    return { type, address };
  });
  return { name: ctx.name, addresses, podCIDRs };
}
