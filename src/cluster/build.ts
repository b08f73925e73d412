// Kubernetes objects + this node's name → the ClusterView the detectors read.
// Pure: the same objects give the same view; nothing here throws on bad input
// (see objects.ts for how bad objects and bad parts become warnings).
import { byText } from '../compare.js';
import { interpretAnnotations, isPrivateIp } from './annotations.js';
import { endpointsFor, indexEndpointSlices } from './endpoints.js';
import { canonicalIp, FieldError, isObj, optArr, optInt, optObj, optStr, reqStr, strArr, strMap, type Obj } from './fields.js';
import { indexIngresses, ingressVipsFor } from './ingress.js';
import { parseEach, parseParts, type ClusterObjects } from './objects.js';
import type { ClusterView, LbIngressIp, NodeView, ServiceView, TrafficPolicy } from './types.js';

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

export function buildClusterView(objects: ClusterObjects, opts: BuildOptions = {}): ClusterView {
  const warnings = [...(opts.warnings ?? [])];
  const endpoints = indexEndpointSlices(objects.endpointSlices, warnings);
  const ingresses = indexIngresses(objects.ingresses, warnings);
  const services = parseEach(objects.services, 'Service', true, warnings, (o, ctx) => {
    const base = parseServiceSpec(o, ctx.metadata, ctx.warn);
    return parseParts(optArr(optObj(o.spec, 'spec')?.ports, 'spec.ports'), 'spec.ports', ctx.warn, (p, path) => {
      const port = parseServicePort(p, path);
      const view: ServiceView = {
        namespace: ctx.namespace,
        name: ctx.name,
        ...port,
        ...base,
        ingressVips: ingressVipsFor(ingresses, ctx.namespace, ctx.name, port.port, port.portName),
        endpoints: endpointsFor(endpoints, ctx.namespace, ctx.name, port.portName, port.protocol, opts.nodeName),
      };
      return view;
    });
  })
    .flat()
    // Watch stores hold objects in arrival order; the view is ordered so that equal states compare equal.
    .sort((a, b) => byText(a.namespace, b.namespace) || byText(a.name, b.name));

  const view: ClusterView = { fresh: opts.fresh ?? true, services, warnings };
  if (opts.syncedAt !== undefined) view.syncedAt = opts.syncedAt;
  if (opts.staleReason !== undefined) view.staleReason = opts.staleReason;
  if (opts.nodeName !== undefined) {
    const node = parseEach(objects.nodes, 'Node', false, warnings, parseNode).find((n) => n.name === opts.nodeName);
    if (node) view.node = node;
    else warnings.push(`node ${JSON.stringify(opts.nodeName)} not found: its addresses and pod CIDRs are unknown`);
  }
  return view;
}

type PortFields = Pick<ServiceView, 'portName' | 'protocol' | 'port' | 'targetPort' | 'nodePort'>;
type SpecFields = Omit<ServiceView, 'namespace' | 'name' | keyof PortFields | 'ingressVips' | 'endpoints'>;

function parseServicePort(p: unknown, path: string): PortFields {
  if (!isObj(p)) throw new FieldError(`${path} is not an object`);
  const port = optInt(p.port, `${path}.port`, 1, 65535);
  if (port === undefined) throw new FieldError(`${path}.port is missing`);
  const protocol = optStr(p.protocol, `${path}.protocol`) ?? 'TCP';
  if (!(PROTOCOLS as readonly string[]).includes(protocol)) throw new FieldError(`${path}.protocol ${JSON.stringify(protocol)} is unknown`);
  const out: PortFields = { portName: optStr(p.name, `${path}.name`) ?? '', protocol: protocol as PortFields['protocol'], port };
  const target = p.targetPort;
  if (typeof target === 'string' && target !== '') out.targetPort = target;
  else out.targetPort = optInt(target, `${path}.targetPort`, 1, 65535) ?? port;
  const nodePort = optInt(p.nodePort, `${path}.nodePort`, 1, 65535);
  if (nodePort !== undefined) out.nodePort = nodePort;
  return out;
}

/** The parts of a ServiceView shared by all its ports. */
function parseServiceSpec(o: Obj, metadata: Obj, warn: (m: string) => void): SpecFields {
  const spec = optObj(o.spec, 'spec') ?? {};
  const type = optStr(spec.type, 'spec.type') ?? 'ClusterIP';
  if (!(SERVICE_TYPES as readonly string[]).includes(type)) throw new FieldError(`spec.type ${JSON.stringify(type)} is unknown`);

  const clusterIPs = strArr(spec.clusterIPs, 'spec.clusterIPs');
  const single = optStr(spec.clusterIP, 'spec.clusterIP');
  if (clusterIPs.length === 0 && single) clusterIPs.push(single);

  const annotations = interpretAnnotations(strMap(metadata.annotations, 'metadata.annotations'));
  const { ips: lbIngress, hostnames } = parseLbStatus(o, warn);
  const out: SpecFields = {
    type: type as ServiceView['type'],
    // 'None' marks a headless Service: there is no VIP to track.
    clusterIPs: parseParts(clusterIPs.filter((ip) => ip !== 'None'), 'spec.clusterIPs', warn, canonicalIp),
    lbIngress,
    externalIPs: parseParts(strArr(spec.externalIPs, 'spec.externalIPs'), 'spec.externalIPs', warn, canonicalIp),
    externalTrafficPolicy: trafficPolicy(spec.externalTrafficPolicy, 'spec.externalTrafficPolicy'),
    internalTrafficPolicy: trafficPolicy(spec.internalTrafficPolicy, 'spec.internalTrafficPolicy'),
    annotations,
    internalLb:
      annotations.internalByAnnotation !== undefined || (lbIngress.length > 0 && lbIngress.every((e) => isPrivateIp(e.ip))),
  };
  if (hostnames.length > 0) out.lbHostnames = hostnames;
  const hc = optInt(spec.healthCheckNodePort, 'spec.healthCheckNodePort', 1, 65535);
  if (hc !== undefined) out.healthCheckNodePort = hc;
  const lbClass = optStr(spec.loadBalancerClass, 'spec.loadBalancerClass');
  if (lbClass) out.loadBalancerClass = lbClass;
  return out;
}

function trafficPolicy(v: unknown, path: string): TrafficPolicy {
  const s = optStr(v, path);
  if (s === undefined || s === '' || s === 'Cluster') return 'Cluster';
  if (s === 'Local') return 'Local';
  throw new FieldError(`${path} ${JSON.stringify(s)} is unknown`);
}

/** status.loadBalancer.ingress: IP entries (ipMode defaults to VIP) and hostname-only entries. */
function parseLbStatus(o: Obj, warn: (m: string) => void): { ips: LbIngressIp[]; hostnames: string[] } {
  const lb = optObj(optObj(o.status, 'status')?.loadBalancer, 'status.loadBalancer');
  const ips: LbIngressIp[] = [];
  const hostnames: string[] = [];
  parseParts(optArr(lb?.ingress, 'status.loadBalancer.ingress'), 'status.loadBalancer.ingress', warn, (e, path) => {
    if (!isObj(e)) throw new FieldError(`${path} is not an object`);
    const hostname = optStr(e.hostname, `${path}.hostname`);
    if (e.ip === undefined || e.ip === null || e.ip === '') {
      if (hostname) hostnames.push(hostname);
      return;
    }
    const mode = optStr(e.ipMode, `${path}.ipMode`) ?? 'VIP';
    if (mode !== 'VIP' && mode !== 'Proxy') throw new FieldError(`${path}.ipMode ${JSON.stringify(mode)} is unknown`);
    const entry: LbIngressIp = { ip: canonicalIp(e.ip, `${path}.ip`), ipMode: mode };
    if (hostname) entry.hostname = hostname;
    ips.push(entry);
  });
  return { ips, hostnames };
}

function parseNode(o: Obj, ctx: { name: string; warn: (m: string) => void }): NodeView {
  const spec = optObj(o.spec, 'spec') ?? {};
  const podCIDRs = strArr(spec.podCIDRs, 'spec.podCIDRs');
  const single = optStr(spec.podCIDR, 'spec.podCIDR');
  if (podCIDRs.length === 0 && single) podCIDRs.push(single);
  const addresses = parseParts(optArr(optObj(o.status, 'status')?.addresses, 'status.addresses'), 'status.addresses', ctx.warn, (a, path) => {
    if (!isObj(a)) throw new FieldError(`${path} is not an object`);
    const type = reqStr(a.type, `${path}.type`);
    const raw = reqStr(a.address, `${path}.address`);
    // Hostname / DNS entries are names, the IP types are addresses to compare with the kernel's.
    const address = type.endsWith('IP') ? canonicalIp(raw, `${path}.address`) : raw;
    return { type, address };
  });
  return { name: ctx.name, addresses, podCIDRs };
}
