// The node's datapath as one typed snapshot: what the sources produce and the detectors read.

import type { NatSnapshot } from '../kernel/nat/types.js';
import type { NftSnapshot } from '../kernel/nft/types.js';
import type {
  AddressSnapshot,
  ConntrackEntry,
  ConntrackSummary,
  IpvsSnapshot,
  LocalRouteSnapshot,
} from '../kernel/types.js';
import type { HostnameLookup } from '../model/hostname-lookup.js';
import type { SourceStatus } from '../model/source-status.js';

export interface NodeSnapshot {
  takenAt: string; // ISO time
  hostname: string;
  kernel: string;
  sources: SourceStatus[];
  addresses?: AddressSnapshot;
  ipvs?: IpvsSnapshot;
  conntrack?: { summary: ConntrackSummary; entries?: ConntrackEntry[] };
  /** iptables/ip6tables nat table and kube-proxy ipsets; see src/kernel/nat/types.ts. */
  nat?: NatSnapshot;
  /** kube-proxy's nftables tables (nftables mode); see src/kernel/nft/types.ts. */
  nft?: NftSnapshot;
  /** What this node's resolver said for the hostname-only LB names (src/source/dns.ts). */
  dns?: { lookups: HostnameLookup[] };
  /** Routes of table local that no address made (src/source/local-routes.ts). */
  localRoutes?: LocalRouteSnapshot;
}
