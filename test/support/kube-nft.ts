// kube-proxy's nftables ruleset for a list of Service ports, in the exact
// format kube-proxy's nftables proxier writes it (pkg/proxy/nftables:
// `add table/chain/map/rule/element ...` lines fed to `nft -f`), for two
// generations of its base-chain layout:
//   v1.31 (v1.31 to early v1.33): filter-prerouting/-input/-forward/-output at
//     priority -110 (dstnat - 10) and filter-output-post-dnat at -90;
//   v1.34 (kubernetes#132456, cherry-picked to 1.33): filter-prerouting-pre-dnat
//     and filter-output-pre-dnat at -110, filter-input/-forward/-output at 0;
//   v1.36 (the v1.34 base chains; kubernetes#135800, #136499, "Squash nftables
//     endpoint chains"): no mark-for-masquerade chain (the mark is set in the
//     rule), the services chain marks ClusterIP traffic from outside the pods,
//     the masquerading chain also masquerades DNATed connections found in the
//     hairpin-connections set (endpoint . endpoint . proto . port of each local
//     endpoint), and service chains DNAT through a numgen map (endpoint chains
//     only for session affinity, with an affinity set of that timeout).
// Written from reading kube-proxy's source and tests; the labs load it into a
// namespace with the real nft and send traffic through it.
import { kubeProxyHash } from './kube-proxy-hash.js';

export type NftLayout = 'v1.31' | 'v1.34' | 'v1.36';

export interface NftEndpoint {
  ip: string;
  port: number;
  /** On this node (kube-proxy compares the EndpointSlice's nodeName with its own). */
  local: boolean;
}

export interface NftService {
  namespace: string;
  name: string;
  portName: string;
  protocol: 'tcp' | 'udp';
  clusterIP: string;
  port: number;
  nodePort?: number;
  /** LB ingress IPs kube-proxy captures: those with ipMode VIP (ipMode Proxy IPs are left out, as kube-proxy >= 1.29 does). */
  lbIPs: string[];
  etp: 'Local' | 'Cluster';
  endpoints: NftEndpoint[];
  sourceRanges?: string[];
  /** sessionAffinity: ClientIP with this timeoutSeconds (v1.36 layout only). */
  affinityTimeout?: number;
}

export interface NftRulesetOptions {
  family: 'ip' | 'ip6';
  layout: NftLayout;
  podCidr: string;
  serviceCidr: string;
  /** --nodeport-addresses: the node IPs that accept NodePorts (kube-proxy's default "primary" mode). */
  nodePortIPs: string[];
  services: NftService[];
  /** --detect-local-mode=BridgeInterface: pods are told by their input interface (`iifname`) instead of the pod CIDR. */
  podInterface?: string;
}

/** kube-proxy's nftables chain-name prefix: 8 base32 characters of the name's SHA-256. */
export const nameHash = (name: string): string => kubeProxyHash(name, 8);

const base = (s: NftService): string => `${s.namespace}/${s.name}/${s.protocol}/${s.portName}`;
const chainName = (prefix: string, s: NftService): string => `${prefix}-${nameHash(base(s))}-${base(s)}`;
const endpointChain = (s: NftService, ep: NftEndpoint): string => {
  const name = `${base(s)}__${ep.ip.replace(/:/g, '.')}/${ep.port}`;
  return `endpoint-${nameHash(name)}-${name}`;
};

const affinitySet = (s: NftService, ep: NftEndpoint): string => endpointChain(s, ep).replace(/^endpoint-/, 'affinity-');

export function kubeProxyRuleset(o: NftRulesetOptions): string {
  const f = o.family;
  const ipX = f === 'ip6' ? 'ip6' : 'ip';
  const addrType = f === 'ip6' ? 'ipv6_addr' : 'ipv4_addr';
  const T = `${f} kube-proxy`;
  const L: string[] = [];
  const add = (s: string): number => L.push(s);
  add(`add table ${T} { comment "rules for kube-proxy" ; }`);
  add(`add set ${T} cluster-ips { type ${addrType} ; comment "Active ClusterIPs" ; }`);
  add(`add set ${T} nodeport-ips { type ${addrType} ; comment "IPs that accept NodePort traffic" ; }`);
  add(
    `add map ${T} firewall-ips { type ${addrType} . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }`,
  );
  add(
    `add map ${T} no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }`,
  );
  add(
    `add map ${T} no-endpoint-services { type ${addrType} . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }`,
  );
  add(
    `add map ${T} service-ips { type ${addrType} . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }`,
  );
  add(`add map ${T} service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }`);
  const v136 = o.layout === 'v1.36';
  if (v136)
    add(
      `add set ${T} hairpin-connections { type ${addrType} . ${addrType} . inet_proto . inet_service ; comment "service hairpin connections" ; }`,
    );
  add(`add chain ${T} cluster-ips-check`);
  if (o.layout !== 'v1.31') {
    add(`add chain ${T} filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }`);
    add(`add chain ${T} filter-output-pre-dnat { type filter hook output priority -110 ; }`);
    add(`add chain ${T} filter-forward { type filter hook forward priority 0 ; }`);
    add(`add chain ${T} filter-input { type filter hook input priority 0 ; }`);
    add(`add chain ${T} filter-output { type filter hook output priority 0 ; }`);
  } else {
    add(`add chain ${T} filter-prerouting { type filter hook prerouting priority -110 ; }`);
    add(`add chain ${T} filter-forward { type filter hook forward priority -110 ; }`);
    add(`add chain ${T} filter-input { type filter hook input priority -110 ; }`);
    add(`add chain ${T} filter-output { type filter hook output priority -110 ; }`);
    add(`add chain ${T} filter-output-post-dnat { type filter hook output priority -90 ; }`);
  }
  for (const c of ['firewall-check', ...(v136 ? [] : ['mark-for-masquerade']), 'masquerading'])
    add(`add chain ${T} ${c}`);
  add(`add chain ${T} nat-output { type nat hook output priority -100 ; }`);
  add(`add chain ${T} nat-postrouting { type nat hook postrouting priority 100 ; }`);
  add(`add chain ${T} nat-prerouting { type nat hook prerouting priority -100 ; }`);
  add(`add chain ${T} nodeport-endpoints-check`);
  add(`add chain ${T} reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }`);
  add(`add chain ${T} services`);
  add(`add chain ${T} service-endpoints-check`);

  add(
    `add rule ${T} cluster-ips-check ${ipX} daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"`,
  );
  add(
    `add rule ${T} cluster-ips-check ${ipX} daddr { ${o.serviceCidr} } drop comment "Drop traffic to unallocated ClusterIPs"`,
  );
  if (o.layout !== 'v1.31') {
    add(`add rule ${T} filter-prerouting-pre-dnat ct state new jump firewall-check`);
    add(`add rule ${T} filter-forward ct state new jump service-endpoints-check`);
    add(`add rule ${T} filter-forward ct state new jump cluster-ips-check`);
    add(`add rule ${T} filter-input ct state new jump nodeport-endpoints-check`);
    add(`add rule ${T} filter-input ct state new jump service-endpoints-check`);
    add(`add rule ${T} filter-output ct state new jump service-endpoints-check`);
    add(`add rule ${T} filter-output-pre-dnat ct state new jump firewall-check`);
    add(`add rule ${T} filter-output ct state new jump cluster-ips-check`);
  } else {
    add(`add rule ${T} filter-input ct state new jump nodeport-endpoints-check`);
    add(`add rule ${T} filter-input ct state new jump service-endpoints-check`);
    add(`add rule ${T} filter-forward ct state new jump service-endpoints-check`);
    add(`add rule ${T} filter-output ct state new jump service-endpoints-check`);
    add(`add rule ${T} filter-prerouting ct state new jump firewall-check`);
    add(`add rule ${T} filter-output ct state new jump firewall-check`);
    add(`add rule ${T} filter-forward ct state new jump cluster-ips-check`);
    add(`add rule ${T} filter-output-post-dnat ct state new jump cluster-ips-check`);
  }
  add(`add rule ${T} firewall-check ${ipX} daddr . meta l4proto . th dport vmap @firewall-ips`);
  if (v136) {
    add(`add rule ${T} masquerading mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random`);
    add(
      `add rule ${T} masquerading ct status dnat ${ipX} saddr . ${ipX} daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random`,
    );
  } else {
    add(`add rule ${T} mark-for-masquerade mark set mark or 0x4000`);
    add(`add rule ${T} masquerading mark and 0x4000 == 0 return`);
    add(`add rule ${T} masquerading mark set mark xor 0x4000`);
    add(`add rule ${T} masquerading masquerade fully-random`);
  }
  add(`add rule ${T} nat-output jump services`);
  add(`add rule ${T} nat-postrouting jump masquerading`);
  add(`add rule ${T} nat-prerouting jump services`);
  add(
    `add rule ${T} nodeport-endpoints-check ${ipX} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports`,
  );
  add(`add rule ${T} reject-chain reject`);
  const notPod = o.podInterface ? `iifname != "${o.podInterface}"` : `${ipX} saddr != ${o.podCidr}`;
  if (v136)
    add(
      `add rule ${T} services ${ipX} daddr @cluster-ips ${notPod} mark set mark or 0x4000 comment "masquerade clusterIP traffic from outside cluster"`,
    );
  add(`add rule ${T} services ${ipX} daddr . meta l4proto . th dport vmap @service-ips`);
  add(`add rule ${T} services ${ipX} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports`);
  for (const ip of o.nodePortIPs) add(`add element ${T} nodeport-ips { ${ip} }`);
  add(`add rule ${T} service-endpoints-check ${ipX} daddr . meta l4proto . th dport vmap @no-endpoint-services`);
  for (const s of o.services) serviceRules(s, o, T, ipX, add);
  // kube-proxy creates every chain of the sync (ensureChain) before the rules that jump to them.
  const rank = (l: string): number => (/^add (table|set|map) /.test(l) ? 0 : l.startsWith('add chain ') ? 1 : 2);
  const ordered = L.map((l, i) => [rank(l), i, l] as const).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  return `${ordered.map((x) => x[2]).join('\n')}\n`;
}

function serviceRules(s: NftService, o: NftRulesetOptions, T: string, ipX: string, add: (l: string) => number): void {
  const name = `${s.namespace}/${s.name}:${s.portName}`;
  const key = (ip: string): string => `${ip} . ${s.protocol} . ${s.port}`;
  const all = s.endpoints;
  const local = all.filter((e) => e.local);
  const hasEndpoints = all.length > 0;
  const svcChain = chainName('service', s);
  const localChain = chainName('local', s);
  const extChain = chainName('external', s);
  const fwChain = chainName('firewall', s);
  const external = s.lbIPs.length > 0 || s.nodePort !== undefined;
  const hasExternalEndpoints = s.etp === 'Local' ? local.length > 0 : hasEndpoints;
  const v136 = o.layout === 'v1.36';
  const markMasq = v136 ? 'mark set mark or 0x4000' : 'jump mark-for-masquerade';
  const affinity = v136 && s.affinityTimeout !== undefined;
  const podMatch = o.podInterface ? `iifname "${o.podInterface}"` : `${ipX} saddr ${o.podCidr}`;
  const dnatTo = (e: NftEndpoint): string => (ipX === 'ip6' ? `[${e.ip}]:${e.port}` : `${e.ip}:${e.port}`);
  const dispatch = (chain: string, eps: NftEndpoint[]): void => {
    add(`add chain ${T} ${chain}`);
    if (chain === svcChain && !v136)
      add(
        `add rule ${T} ${chain} ${ipX} daddr ${s.clusterIP} ${s.protocol} dport ${s.port} ${ipX} saddr != ${o.podCidr} jump mark-for-masquerade`,
      );
    if (v136 && !affinity) {
      // Without session affinity v1.36 DNATs from the service chain itself: one endpoint directly, more through a numgen map.
      if (eps.length === 1) add(`add rule ${T} ${chain} meta l4proto ${s.protocol} dnat to ${dnatTo(eps[0]!)}`);
      else
        add(
          `add rule ${T} ${chain} meta l4proto ${s.protocol} dnat ${ipX} addr . port to numgen random mod ${eps.length} map { ${eps.map((e, i) => `${i} : ${e.ip} . ${e.port}`).join(' , ')} }`,
        );
      return;
    }
    if (affinity)
      for (const e of eps) add(`add rule ${T} ${chain} ${ipX} saddr @${affinitySet(s, e)} goto ${endpointChain(s, e)}`);
    const vm = eps.map((e, i) => `${i} : goto ${endpointChain(s, e)}`).join(' , ');
    add(`add rule ${T} ${chain} numgen random mod ${eps.length} vmap { ${vm} }`);
  };
  if (hasEndpoints) dispatch(svcChain, all);
  if (s.etp === 'Local' && local.length > 0) dispatch(localChain, local);
  if (hasEndpoints && external) {
    add(`add chain ${T} ${extChain}`);
    if (s.etp === 'Cluster') {
      add(`add rule ${T} ${extChain} ${markMasq}`);
      add(`add rule ${T} ${extChain} goto ${svcChain}`);
    } else {
      add(`add rule ${T} ${extChain} ${podMatch} goto ${svcChain} comment "short-circuit pod traffic"`);
      add(`add rule ${T} ${extChain} fib saddr type local ${markMasq} comment "masquerade local traffic"`);
      add(`add rule ${T} ${extChain} fib saddr type local goto ${svcChain} comment "short-circuit local traffic"`);
      if (local.length > 0) add(`add rule ${T} ${extChain} goto ${localChain}`);
    }
  }
  for (const e of all) {
    if (v136 && e.local) add(`add element ${T} hairpin-connections { ${e.ip} . ${e.ip} . ${s.protocol} . ${e.port} }`);
    if (v136 && !affinity) continue;
    const c = endpointChain(s, e);
    add(`add chain ${T} ${c}`);
    if (affinity) {
      add(
        `add set ${T} ${affinitySet(s, e)} { type ${ipX === 'ip6' ? 'ipv6_addr' : 'ipv4_addr'} ; flags dynamic,timeout ; timeout ${s.affinityTimeout}s ; }`,
      );
      add(`add rule ${T} ${c} update @${affinitySet(s, e)} { ${ipX} saddr }`);
    } else add(`add rule ${T} ${c} ${ipX} saddr ${e.ip} jump mark-for-masquerade`);
    add(`add rule ${T} ${c} meta l4proto ${s.protocol} dnat to ${dnatTo(e)}`);
  }
  if (s.sourceRanges?.length && s.lbIPs.length) {
    add(`add chain ${T} ${fwChain}`);
    add(`add rule ${T} ${fwChain} ${ipX} saddr != { ${s.sourceRanges.join(', ')} } drop`);
    for (const ip of s.lbIPs) add(`add element ${T} firewall-ips { ${key(ip)} comment "${name}" : goto ${fwChain} }`);
  }
  add(`add element ${T} cluster-ips { ${s.clusterIP} }`);
  if (hasEndpoints) {
    add(`add element ${T} service-ips { ${key(s.clusterIP)} : goto ${svcChain} }`);
    for (const ip of s.lbIPs) add(`add element ${T} service-ips { ${key(ip)} : goto ${extChain} }`);
    if (s.nodePort !== undefined)
      add(`add element ${T} service-nodeports { ${s.protocol} . ${s.nodePort} : goto ${extChain} }`);
  } else {
    add(`add element ${T} no-endpoint-services { ${key(s.clusterIP)} comment "${name}" : goto reject-chain }`);
  }
  if (!hasExternalEndpoints) {
    const verdict = hasEndpoints ? 'drop' : 'goto reject-chain';
    for (const ip of s.lbIPs)
      add(`add element ${T} no-endpoint-services { ${key(ip)} comment "${name}" : ${verdict} }`);
    if (s.nodePort !== undefined)
      add(`add element ${T} no-endpoint-nodeports { ${s.protocol} . ${s.nodePort} comment "${name}" : ${verdict} }`);
  }
}
