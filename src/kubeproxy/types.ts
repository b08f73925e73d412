// The facts kube-proxy's rules give (facts.ts reads iptables/IPVS, nftables.ts nftables), shared by both readers.
import type { NatFamily } from '../kernel/nat/types.js';
import type { ProxyMode } from '../model/kube-proxy.js';
import type { TrafficPolicy } from '../model/service.js';
import type { PodSelectors } from './pod-selectors.js';

export interface LoadBalancerFact {
  family: NatFamily;
  vip: string;
  port: number;
  protocol: string;
  /** 'namespace/name:port' from the rule comment (iptables mode only; IPVS ipsets carry no names). */
  service?: string;
  trafficPolicy?: TrafficPolicy;
  /** masquerade: pod→VIP gets KUBE-MARK-MASQ (source becomes the node IP); exempt: ETP=Local skips it. */
  podTraffic: 'masquerade' | 'exempt' | 'unknown';
  /** Where the nat table sends pod -> VIP; filter-table drops (e.g. KUBE-PROXY-FIREWALL) are not seen here. */
  capture: 'dnat' | 'ipvs' | 'not-captured' | 'dropped' | 'unknown';
  /** nftables no-endpoint-services element, or iptables KUBE-EXTERNAL-SERVICES "has no local endpoints" DROP. */
  noEndpoints?: {
    /** The no-endpoint-services verdict: drop (ETP=Local, endpoints elsewhere) or reject (no endpoints at all). */
    verdict: 'drop' | 'reject';
    /** Base chains that look the VIP up before DNAT on a hook local clients use (the kubernetes#131765 layout). */
    preDnatChecks: string[];
    evidence: string[];
  };
  /** Source ranges that leave this node's pods out, so the node drops their VIP connections; evidence: the rules. */
  sourceRangeDrop?: { certain: boolean; evidence: string[] };
  /** nftables mode: an LB IP or a Service external IP (service-ips holds both alike). */
  lbOrExternal?: true;
  /** Rule lines ('iptables-nft-save:123: -A ...'), ipset lookups and nft objects that show the above. */
  evidence: string[];
}

export interface NodePortFact {
  family: NatFamily;
  port: number;
  protocol: string;
  service?: string;
  trafficPolicy?: TrafficPolicy;
  /** Evidence shown by nodePortEvidence(fact), shared by reference because the agent keeps every NodePort's fact. */
  shownBy: readonly NodePortSource[];
}

/** A rule line or nft element as quoted, or an IPVS KUBE-NODE-PORT rule; `member` only if it is not the port. */
export type NodePortSource = string | { readonly set: string; readonly rule: string; readonly member?: string };

export interface KubeNatFacts {
  /** What the rules show: one mode, rules of several (left over after a mode switch), or none. */
  mode: ProxyMode | 'mixed' | 'none';
  modeEvidence: string[];
  /** iptables mode: chain names before 1.24 (KUBE-XLB) or from 1.24 (KUBE-EXT/KUBE-SVL). */
  iptablesGeneration?: 'pre-1.24' | '1.24+';
  /** nftables mode: the filter base chains' layout per family (v1.31: kubernetes#131765; v1.34: #132456). */
  nftLayouts?: Partial<Record<NatFamily, 'v1.31' | 'v1.34' | 'other'>>;
  /** How kube-proxy tells pod traffic apart (e.g. '-s 10.244.0.0/16'), per family. */
  podSelectors: Partial<Record<NatFamily, PodSelectors>>;
  loadBalancers: LoadBalancerFact[];
  nodePorts: NodePortFact[];
  /** Families whose kube-proxy rules could not be read (with the reason): a VIP of them without a fact is unknown. */
  unreadable?: Partial<Record<NatFamily, string>>;
}
