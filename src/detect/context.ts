// Indexes built once per diagnosis so each detector and the conntrack
// correlator answer "is this address/port one of ours?" in O(1).
import type { ServiceView } from '../cluster/types.js';
import type { IpvsVirtualServer } from '../kernel/types.js';
import { cidrMatcher, inCidr } from '../kernel/ip.js';
import { addTo, key, listOf, type Key, type OneOrMore as ModelOneOrMore } from '../model/address-key.js';
import type { DetectContext } from './context-types.js';
import { classifyProxyMode } from './proxy-classify.js';
import type { DiagnoseInput, LbNatFact } from './core-types.js';

export type { ServiceProtocol as Proto } from '../model/protocol.js';
export { protocolOfNumber as protoOf } from '../model/protocol.js';
export type { DetectContext, ProxyModeInfo } from './context-types.js';

/** A context map's value: one Service port, or several sharing the key. */
type OneOrMore = ModelOneOrMore<ServiceView>;

export function buildContext(input: DiagnoseInput): DetectContext {
  const services = input.cluster.services.filter((s) => s.lbIngress.length > 0 || s.ingressVips.length > 0 || s.lbHostnames !== undefined);
  const byLbVip = new Map<Key, OneOrMore>();
  const byLbIp = new Map<string, OneOrMore>();
  const byIngressVip = new Map<string, OneOrMore>();
  const byNodePort = new Map<Key, ServiceView>();
  const byLocalEndpoint = new Map<Key, OneOrMore>();
  for (const s of services) {
    for (const ing of s.lbIngress) {
      addTo(byLbVip, key(ing.ip, s.protocol, s.port), s);
      addTo(byLbIp, ing.ip, s);
    }
    for (const iv of s.ingressVips) addTo(byIngressVip, iv.ip, s);
    if (s.nodePort) byNodePort.set(key('', s.protocol, s.nodePort), s);
    for (const ep of s.endpoints) {
      if (ep.local) addTo(byLocalEndpoint, key(ep.address, s.protocol, ep.port ?? numericTarget(s)), s);
    }
  }
  const ipvs = new Map<Key, IpvsVirtualServer>();
  for (const vs of input.node.ipvs?.virtualServers ?? []) {
    if (vs.address !== undefined) ipvs.set(key(vs.address, String(vs.protocol), vs.port), vs);
  }
  const nat = new Map<Key, LbNatFact>();
  for (const f of input.nat?.lb ?? []) nat.set(key(f.ip, f.protocol, f.port), f);
  const nodeIps = new Set(input.local.nodeIps);
  const ipvsBound = new Set(input.local.ipvsIps);
  // Parsed once: isPodIp runs for every conntrack entry (a malformed CIDR from the cluster matches nothing).
  const podCidrs = cidrMatcher(input.local.podCidrs);
  const isPodIp = (ip: string): boolean => podCidrs.has(ip);
  const localRoutes = input.node.localRoutes?.routes ?? [];
  return {
    input,
    services,
    nodeIps,
    ipvsBound,
    proxy: classifyProxyMode(input, services),
    isPodIp,
    isLocalSource: (ip) => nodeIps.has(ip) || isPodIp(ip),
    lbVipServices: (ip, proto, port) => listOf(byLbVip.get(key(ip, proto, port))),
    lbIpServices: (ip) => listOf(byLbIp.get(ip)),
    ingressVipServices: (ip) => listOf(byIngressVip.get(ip)),
    nodePortService: (proto, port) => byNodePort.get(key('', proto, port)),
    localEndpointServices: (ip, proto, port) => listOf(byLocalEndpoint.get(key(ip, proto, port))),
    ipvsService: (ip, proto, port) => ipvs.get(key(ip, proto, port)),
    natFact: (ip, proto, port) => nat.get(key(ip, proto, port)),
    // A handful of routes per node (guest agents add one per forwarded IP or alias range): a scan.
    localRouteFor: (ip) => localRoutes.find((r) => inCidr(ip, r.dst)),
  };
}


function numericTarget(s: ServiceView): number | undefined {
  return typeof s.targetPort === 'number' ? s.targetPort : undefined;
}
