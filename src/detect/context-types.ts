// What every detector is given (built in context.ts, proxy mode from proxy-mode.ts); types only, so the
// detectors that build a part of it can name it without an import loop.
import type { LbServiceIndex } from '../cluster/lb-index.js';
import type { ServiceView } from '../cluster/types.js';
import type { IpvsVirtualServer, LocalRoute } from '../kernel/types.js';
import type { DiagnoseInput, LbNatFact, NodeProxyMode } from './core-types.js';

export type LbBinding = 'bound' | 'unbound' | 'mixed' | 'none-expected';

export interface ProxyModeInfo {
  mode: NodeProxyMode;
  /** IPVS only: whether the LB IPs kube-proxy should handle are bound on kube-ipvs0. */
  lbBinding?: LbBinding;
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
  lb: Pick<
    LbServiceIndex,
    'lbVipServices' | 'lbIpServices' | 'ingressVipServices' | 'nodePortService' | 'localEndpointServices'
  >;
  ipvsService(ip: string, proto: string, port: number): IpvsVirtualServer | undefined;
  natFact(ip: string, proto: string, port: number): LbNatFact | undefined;
  /** The non-kernel `local` route (a guest agent's) making this address the node's own, if read and present. */
  localRouteFor(ip: string): LocalRoute | undefined;
}
