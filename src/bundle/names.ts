// A bundle's file names, written by `clbprobe collect` and read by readBundle (commands in src/bundle/README.md).
import type { IpFamily } from '../model/address-family.js';

export const BUNDLE_FILES = {
  ipAddr: 'ip-addr.json',
  ipRoute: 'ip-route.json',
  ip6Route: 'ip6-route.json',
  /** `ip -j route show table local`: local routes no address made (cloud guest agents'). */
  ipRouteLocal: 'ip-route-local.json',
  ip6RouteLocal: 'ip6-route-local.json',
  /** Any `ipvsadm*.txt` is read; collect writes these two views. */
  ipvsadmSave: 'ipvsadm-save.txt',
  ipvsadmStats: 'ipvsadm-stats.txt',
  /** clbprobe's own IPVS dump (IpvsSnapshot JSON), when ipvsadm is not installed. */
  ipvsJson: 'ipvs.json',
  iptablesSave: 'iptables-save.txt',
  ip6tablesSave: 'ip6tables-save.txt',
  ipset: 'ipset.txt',
  /** `nft -j list ruleset`: kube-proxy's nftables-mode tables are read from it. */
  nftRuleset: 'nft-ruleset.json',
  conntrack: 'conntrack.txt',
  /** What the node's resolver answered for the hostname-only LB names (collect only; src/bundle/parse-dns.ts). */
  dnsLookups: 'dns-lookups.json',
  sysctl: 'sysctl.txt',
  uname: 'uname.txt',
  kubeProxy: 'kube-proxy.json',
  cluster: 'cluster.json',
} as const;

/** Per-backend save outputs: iptables-legacy-save.txt, ip6tables-nft-save.txt, ... */
export function backendSaveFile(backend: 'legacy' | 'nft', family: IpFamily): string {
  return `ip${family === 6 ? '6' : ''}tables-${backend}-save.txt`;
}
