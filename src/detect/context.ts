// Indexes built once per diagnosis so each detector and the conntrack
// correlator answer "is this address/port one of ours?" in O(1).
import type { ServiceView } from '../cluster/types.js';
import { cidrMatcher } from '../kernel/ip.js';
import type { IpvsVirtualServer } from '../kernel/types.js';
import { classifyProxyMode, type ProxyModeInfo } from './proxy-mode.js';
import type { DiagnoseInput, LbNatFact } from './types.js';

export type Proto = 'TCP' | 'UDP' | 'SCTP';

export function protoOf(protoNum: number): Proto | undefined {
  return protoNum === 6 ? 'TCP' : protoNum === 17 ? 'UDP' : protoNum === 132 ? 'SCTP' : undefined;
}

const key = (ip: string, proto: string, port: number | undefined): string => `${ip}|${proto}|${port ?? ''}`;

export interface DetectContext {
  input: DiagnoseInput;
  /** Service ports that have an LB ingress IP or an Ingress VIP: the only ones loopback concerns. */
  services: ServiceView[];
  nodeIps: Set<string>;
  ipvsBound: Set<string>;
  proxy: ProxyModeInfo;
  /** LB ingress IP:port → Service ports. */
  byLbVip: Map<string, ServiceView[]>;
  /** LB ingress IP (any port) → Service ports: health checks come from the VIP itself. */
  byLbIp: Map<string, ServiceView[]>;
  /** Ingress VIP → Service ports behind it (port-agnostic: the Ingress listens on 80/443). */
  byIngressVip: Map<string, ServiceView[]>;
  /** proto|NodePort → Service port. */
  byNodePort: Map<string, ServiceView>;
  /** Local endpoint ip:port → Service ports (the direct-pod return leg). */
  byLocalEndpoint: Map<string, ServiceView[]>;
  isPodIp(ip: string): boolean;
  /** A source that belongs to this node: one of its pods or its own addresses. */
  isLocalSource(ip: string): boolean;
  lbVipServices(ip: string, proto: string, port: number | undefined): ServiceView[] | undefined;
  ipvsService(ip: string, proto: string, port: number): IpvsVirtualServer | undefined;
  natFact(ip: string, proto: string, port: number): LbNatFact | undefined;
}

function push<T>(m: Map<string, T[]>, k: string, v: T): void {
  const a = m.get(k);
  if (a) a.push(v);
  else m.set(k, [v]);
}

export function buildContext(input: DiagnoseInput): DetectContext {
  const services = input.cluster.services.filter((s) => s.lbIngress.length > 0 || s.ingressVips.length > 0);
  const byLbVip = new Map<string, ServiceView[]>();
  const byLbIp = new Map<string, ServiceView[]>();
  const byIngressVip = new Map<string, ServiceView[]>();
  const byNodePort = new Map<string, ServiceView>();
  const byLocalEndpoint = new Map<string, ServiceView[]>();
  for (const s of services) {
    for (const ing of s.lbIngress) {
      push(byLbVip, key(ing.ip, s.protocol, s.port), s);
      push(byLbIp, ing.ip, s);
    }
    for (const iv of s.ingressVips) push(byIngressVip, iv.ip, s);
    if (s.nodePort) byNodePort.set(key('', s.protocol, s.nodePort), s);
    for (const ep of s.endpoints) {
      if (ep.local) push(byLocalEndpoint, key(ep.address, s.protocol, ep.port ?? numericTarget(s)), s);
    }
  }
  const ipvs = new Map<string, IpvsVirtualServer>();
  for (const vs of input.node.ipvs?.virtualServers ?? []) {
    if (vs.address !== undefined) ipvs.set(key(vs.address, String(vs.protocol), vs.port), vs);
  }
  const nat = new Map<string, LbNatFact>();
  for (const f of input.nat?.lb ?? []) nat.set(key(f.ip, f.protocol, f.port), f);
  const nodeIps = new Set(input.local.nodeIps);
  const ipvsBound = new Set(input.local.ipvsIps);
  // Parsed once: isPodIp runs for every conntrack entry (a malformed CIDR from the cluster matches nothing).
  const podCidrs = cidrMatcher(input.local.podCidrs);
  const isPodIp = (ip: string): boolean => podCidrs.has(ip);
  return {
    input,
    services,
    nodeIps,
    ipvsBound,
    proxy: classifyProxyMode(input, services),
    byLbVip,
    byLbIp,
    byIngressVip,
    byNodePort,
    byLocalEndpoint,
    isPodIp,
    isLocalSource: (ip) => nodeIps.has(ip) || isPodIp(ip),
    lbVipServices: (ip, proto, port) => byLbVip.get(key(ip, proto, port)),
    ipvsService: (ip, proto, port) => ipvs.get(key(ip, proto, port)),
    natFact: (ip, proto, port) => nat.get(key(ip, proto, port)),
  };
}

export const nodePortKey = (proto: string, port: number | undefined): string => key('', proto, port);
export const endpointKey = (ip: string, proto: string, port: number | undefined): string => key(ip, proto, port);

function numericTarget(s: ServiceView): number | undefined {
  return typeof s.targetPort === 'number' ? s.targetPort : undefined;
}
