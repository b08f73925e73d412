import type { IpFamily } from '../model/address-family.js';
import type { ServiceProtocol } from '../model/protocol.js';
import type { FORWARDS, STATS_KEYS } from './ipvs/uapi.js';

// Typed snapshots of the node's datapath as the readers produce them; src/detect consumes nothing else from the kernel.

/** IPv4 or IPv6 (src/model/address-family.ts). */
export type Family = IpFamily;

export interface InterfaceAddress {
  family: Family;
  address: string; // canonical text form (IPv6 compressed, lower case)
  prefixLen: number;
  scope: 'global' | 'site' | 'link' | 'host' | 'nowhere' | number;
  label?: string;
  /** IFA_F_* flag names, e.g. ['permanent'], ['secondary'], ['noprefixroute']. */
  flags: string[];
}

export interface NetInterface {
  index: number;
  name: string;
  /** IFLA_INFO_KIND: 'veth', 'bridge', 'dummy', 'vxlan', ... ; undefined for physical NICs and lo. */
  kind?: string;
  up: boolean;
  mtu: number;
  mac?: string;
  /** Index of the master (bridge) device, if enslaved. */
  master?: number;
  /** True for kube-proxy's IPVS dummy device, where Service VIPs get bound. */
  isKubeIpvs: boolean;
  addresses: InterfaceAddress[];
}

export interface AddressSnapshot {
  interfaces: NetInterface[]; // kube-ipvs0 first, then by index
}

export type AddressEvent = {
  kind: 'add' | 'remove';
  ifindex: number;
  ifname?: string;
  address: InterfaceAddress;
};

// ---- IPVS -----------------------------------------------------------------

/** Counters and rates, as IPVS_STATS_ATTR_* give them. */
export type IpvsStats = Record<(typeof STATS_KEYS)[number], number>;

/** A forwarding method's name, or its number when it has none. */
export type IpvsForward = (typeof FORWARDS)[number] | number;

export interface IpvsRealServer {
  address: string;
  port: number;
  weight: number;
  forward: IpvsForward;
  activeConns: number;
  inactiveConns: number;
  persistentConns: number;
  stats?: IpvsStats;
  /** Address family of the real server when it differs from the service's (tunnels may cross families). */
  family?: Family;
  /** Connection thresholds (ipvsadm -x/-y); 0 = none. */
  upperThreshold?: number;
  lowerThreshold?: number;
  /** Only for forward 'tunnel'. */
  tunnel?: IpvsTunnel;
}

export interface IpvsTunnel {
  type: 'ipip' | 'gue' | 'gre' | number;
  /** GUE destination port; 0 otherwise. */
  port: number;
  checksum: 'nocsum' | 'csum' | 'remcsum' | number;
}

export interface IpvsVirtualServer {
  family: Family;
  /** 0 for fwmark services (they match any protocol). */
  protocol: ServiceProtocol | number;
  /** Absent for fwmark services. */
  address?: string;
  port?: number;
  fwmark?: number;
  scheduler: string;
  /** IP_VS_SVC_F_* names as ipvsadm spells them, without the kernel-internal 'hashed' bit. */
  flags: string[];
  /** Persistence timeout in seconds (0 when not persistent). */
  timeoutS: number;
  /**
   * Persistence granularity: a dotted mask for IPv4 ('255.255.255.255' = per client), a prefix
   * length for IPv6 ('128').
   */
  netmask?: string;
  /** Persistence engine (e.g. 'sip'). */
  peName?: string;
  stats?: IpvsStats;
  realServers: IpvsRealServer[];
}

export interface IpvsSnapshot {
  virtualServers: IpvsVirtualServer[];
  /** Fields ipvsadm text could not provide (so 0 or absent); absent for a netlink read, which has them all. */
  missing?: string[];
}

// ---- Conntrack -------------------------------------------------------------

export interface ConntrackTuple {
  src: string;
  dst: string;
  /** IPPROTO number (6 tcp, 17 udp, 1 icmp, 58 icmpv6, 132 sctp). */
  protoNum: number;
  sport?: number;
  dport?: number;
  /** ICMP id/type/code when protoNum is ICMP. */
  icmpId?: number;
  icmpType?: number;
  icmpCode?: number;
}

export interface ConntrackCounters {
  packets: number;
  bytes: number;
}

export interface ConntrackEntry {
  family: Family;
  /** Protocol name as conntrack(8) prints it: 'tcp', 'udp', 'icmp', 'icmpv6', 'sctp', or the number. */
  proto: string;
  orig: ConntrackTuple;
  reply: ConntrackTuple;
  /** TCP state name as conntrack(8) prints it (e.g. 'ESTABLISHED', 'SYN_SENT'); undefined for other protocols. */
  tcpState?: string;
  /** SCTP state name as conntrack(8) prints it (e.g. 'ESTABLISHED', 'COOKIE_WAIT'); undefined for other protocols. */
  sctpState?: string;
  status: number;
  /** Status flag names, e.g. ['SEEN_REPLY', 'ASSURED', 'CONFIRMED', 'DST_NAT']. */
  statusFlags: string[];
  timeoutS: number;
  mark: number;
  zone: number;
  id: number;
  use?: number;
  origCounters?: ConntrackCounters;
  replyCounters?: ConntrackCounters;
  /** CTA_TIMESTAMP start, in ns since boot, when net.netfilter.nf_conntrack_timestamp is on. */
  startNs?: bigint;
}

export type ConntrackEventType = 'NEW' | 'UPDATE' | 'DESTROY';

export interface ConntrackEvent {
  type: ConntrackEventType;
  entry: ConntrackEntry;
  /** Date.now() when the event was received. */
  receivedAtMs: number;
}

export interface ConntrackSummary {
  total: number;
  byProto: Record<string, number>;
  /** TCP state counts; non-TCP entries are counted as 'UNREPLIED' / 'REPLIED' for this summary. */
  byState: Record<string, number>;
}

/**
 * A non-kernel `local` route in table local: the node accepts `dst` as its own without the address on any link;
 * cloud guest agents add them for LB IPs (GCE: protocol 66).
 */
export interface LocalRoute {
  family: Family;
  /** The prefix, as 'a.b.c.d/32' or 'x::y/128' for single addresses. */
  dst: string;
  dev?: string;
  /** As ip prints it: a name from rt_protos ('static', 'boot') or the number ('66'). */
  protocol: string;
}

export interface LocalRouteSnapshot {
  routes: LocalRoute[];
}
