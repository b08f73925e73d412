// What every detector is given, built once per diagnosis so detectors and the correlator answer "is this ours?" in
// O(1); LB Services come from cluster/lb-index.ts, the proxy mode from classifyProxyMode.

import { LbServiceIndex } from '../cluster/lb-index.js';
import type { ServiceView } from '../cluster/types.js';
import { cidrMatcher, inCidr } from '../kernel/ip.js';
import type { IpvsVirtualServer, LocalRoute } from '../kernel/types.js';
import { type Key, key } from '../model/address-key.js';
import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import type { DiagnoseInput, LbNatFact, NodeProxyMode } from './core-types.js';
import { firstOf } from './tool-lines.js';

export interface ProxyModeInfo {
  mode: NodeProxyMode;
  /** IPVS only: whether the LB IPs kube-proxy should handle are bound on kube-ipvs0. */
  lbBinding?: 'bound' | 'unbound' | 'mixed' | 'none-expected';
  evidence: string[];
}

export interface DetectContext {
  input: DiagnoseInput;
  /** Service ports that have an LB ingress IP, an LB hostname or an Ingress VIP: the only ones loopback concerns. */
  services: ServiceView[];
  nodeIps: Set<string>;
  ipvsBound: Set<string>;
  proxy: ProxyModeInfo;
  isPodIp(ip: string): boolean;
  /** A source that belongs to this node: one of its pods or its own addresses. */
  isLocalSource(ip: string): boolean;
  /** The LB-Service index: which Service ports an LB VIP, LB IP, Ingress VIP, NodePort or local endpoint is. */
  lb: Pick<LbServiceIndex, 'lbVipServices' | 'lbIpServices' | 'ingressVipServices' | 'nodePortService' | 'returnLeg'>;
  ipvsService(ip: string, proto: string, port: number): IpvsVirtualServer | undefined;
  natFact(ip: string, proto: string, port: number): LbNatFact | undefined;
  /** The non-kernel `local` route (a guest agent's) making this address the node's own, if read and present. */
  localRouteFor(ip: string): LocalRoute | undefined;
}

/** Every finding carries this evidence, so it names a few examples rather than every LB IP. */
const MAX_LISTED = 10;

/** Which kube-proxy datapath this node runs and whether IPVS binds LB IPs. */
function classifyProxyMode(input: DiagnoseInput, services: ServiceView[]): ProxyModeInfo {
  const evidence: string[] = [];
  const ifaces = input.node.addresses?.interfaces ?? [];
  const kubeIpvs = ifaces.find((i) => i.isKubeIpvs);
  const vsCount = input.node.ipvs?.virtualServers.length ?? 0;
  let mode: NodeProxyMode = input.nat?.proxyMode ?? 'unknown';
  if (input.nat && mode !== 'unknown') evidence.push(...input.nat.evidence);
  if (mode === 'unknown' && (vsCount > 0 || kubeIpvs)) mode = 'ipvs';
  if (kubeIpvs) evidence.push(`${KUBE_IPVS_IFNAME}: ${kubeIpvs.addresses.length} addresses bound`);
  if (vsCount > 0) evidence.push(`IPVS: ${vsCount} virtual servers`);
  if (mode !== 'ipvs') return { mode, evidence };
  // LB IPs a community kube-proxy would bind: ipMode VIP and no hostname-only status.
  const wanted = new Set<string>();
  for (const s of services) for (const i of s.lbIngress) if (i.ipMode === 'VIP' && !i.resolvedFrom) wanted.add(i.ip);
  const want = [...wanted];
  const onIpvs = new Set(input.local.ipvsIps);
  const bound = want.filter((ip) => onIpvs.has(ip));
  const unbound = want.filter((ip) => !onIpvs.has(ip));
  if (bound.length > 0) evidence.push(`LB IPs bound on ${KUBE_IPVS_IFNAME}: ${firstOf(bound, MAX_LISTED)}`);
  if (unbound.length > 0) evidence.push(`LB IPs not bound on ${KUBE_IPVS_IFNAME}: ${firstOf(unbound, MAX_LISTED)}`);
  const lbBinding: ProxyModeInfo['lbBinding'] =
    want.length === 0 ? 'none-expected' : unbound.length === 0 ? 'bound' : bound.length === 0 ? 'unbound' : 'mixed';
  return { mode, lbBinding, evidence };
}

/** The detectors' indexes; `lb`: the view's LB index when the caller (the agent) has one, else built here. */
export function buildContext(input: DiagnoseInput, lb?: LbServiceIndex): DetectContext {
  const idx = lb?.view === input.cluster ? lb : new LbServiceIndex(input.cluster);
  const services = idx.services;
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
    lb: idx,
    ipvsService: (ip, proto, port) => ipvs.get(key(ip, proto, port)),
    natFact: (ip, proto, port) => nat.get(key(ip, proto, port)),
    // A handful of routes per node (guest agents add one per forwarded IP or alias range): a scan.
    localRouteFor: (ip) => localRoutes.find((r) => inCidr(ip, r.dst)),
  };
}
