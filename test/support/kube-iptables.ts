// kube-proxy's iptables-mode rules (1.25+ format, pkg/proxy/iptables) for the
// nftables lab's Services (test/support/nft-services.ts), as iptables-restore
// input: KUBE-EXT/KUBE-SVL chains, loadBalancerSourceRanges through KUBE-FW-X
// and the filter table's KUBE-PROXY-FIREWALL, and ETP=Local without local
// endpoints dropped by the filter table's KUBE-EXTERNAL-SERVICES ("has no local
// endpoints") while pods are short-circuited. Written from kube-proxy's
// expected rule sets (proxier_test.go); the labs load it with iptables-restore.

import type { NftEndpoint, NftService } from './kube-nft.js';
import { kubeProxyHash } from './kube-proxy-hash.js';

const hash = (text: string): string => kubeProxyHash(text, 16);

export function kubeProxyIptables(services: NftService[], podCidr: string): string {
  const filter: string[] = [];
  const nat: string[] = [];
  const natChains = new Set(['KUBE-SERVICES', 'KUBE-MARK-MASQ', 'KUBE-POSTROUTING', 'KUBE-NODEPORTS']);
  for (const s of services) serviceRules(s, podCidr, filter, nat, natChains);
  return [
    '*filter',
    ':INPUT ACCEPT [0:0]',
    ':FORWARD ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':KUBE-EXTERNAL-SERVICES - [0:0]',
    ':KUBE-PROXY-FIREWALL - [0:0]',
    '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
    '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
    '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
    '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
    '-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
    ...filter,
    'COMMIT',
    '*nat',
    ':PREROUTING ACCEPT [0:0]',
    ':INPUT ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':POSTROUTING ACCEPT [0:0]',
    ...[...natChains].map((c) => `:${c} - [0:0]`),
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    '-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000',
    '-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN',
    '-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0',
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    ...nat,
    '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
    'COMMIT',
    '',
  ].join('\n');
}

function serviceRules(s: NftService, podCidr: string, filter: string[], nat: string[], chains: Set<string>): void {
  const name = `${s.namespace}/${s.name}:${s.portName}`;
  const id = hash(`${name}${s.protocol}`);
  const [svc, svl, ext, fw] = ['SVC', 'SVL', 'EXT', 'FW'].map((k) => `KUBE-${k}-${id}`) as [
    string,
    string,
    string,
    string,
  ];
  const local = s.endpoints.filter((e) => e.local);
  const p = `-p ${s.protocol} -m ${s.protocol} --dport ${s.port}`;
  const sep = (e: NftEndpoint): string => `KUBE-SEP-${hash(`${name}${s.protocol}${e.ip}:${e.port}`)}`;
  const fanOut = (chain: string, eps: NftEndpoint[]): void => {
    chains.add(chain);
    eps.forEach((e, i) => {
      const left = eps.length - i;
      const stat = left > 1 ? ` -m statistic --mode random --probability ${(1 / left).toFixed(11)}` : '';
      nat.push(`-A ${chain} -m comment --comment "${name} -> ${e.ip}:${e.port}"${stat} -j ${sep(e)}`);
    });
  };
  if (s.endpoints.length === 0) return;
  nat.push(
    `-A KUBE-SERVICES -d ${s.clusterIP}/32 -p ${s.protocol} -m comment --comment "${name} cluster IP" -m ${s.protocol} --dport ${s.port} -j ${svc}`,
  );
  nat.push(
    `-A ${svc} ! -s ${podCidr} -d ${s.clusterIP}/32 -p ${s.protocol} -m comment --comment "${name} cluster IP" -m ${s.protocol} --dport ${s.port} -j KUBE-MARK-MASQ`,
  );
  fanOut(svc, s.endpoints);
  for (const e of s.endpoints) {
    chains.add(sep(e));
    nat.push(`-A ${sep(e)} -s ${e.ip}/32 -m comment --comment "${name}" -j KUBE-MARK-MASQ`);
    nat.push(
      `-A ${sep(e)} -p ${s.protocol} -m comment --comment "${name}" -m ${s.protocol} -j DNAT --to-destination ${e.ip}:${e.port}`,
    );
  }
  if (s.lbIPs.length === 0) return;
  chains.add(ext);
  if (s.etp === 'Cluster') {
    nat.push(`-A ${ext} -m comment --comment "masquerade traffic for ${name} external destinations" -j KUBE-MARK-MASQ`);
    nat.push(`-A ${ext} -j ${svc}`);
  } else {
    nat.push(`-A ${ext} -s ${podCidr} -m comment --comment "pod traffic for ${name} external destinations" -j ${svc}`);
    nat.push(
      `-A ${ext} -m comment --comment "masquerade LOCAL traffic for ${name} external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ`,
    );
    nat.push(
      `-A ${ext} -m comment --comment "route LOCAL traffic for ${name} external destinations" -m addrtype --src-type LOCAL -j ${svc}`,
    );
    if (local.length > 0) {
      nat.push(`-A ${ext} -j ${svl}`);
      fanOut(svl, local);
    }
  }
  const ranged = (s.sourceRanges?.length ?? 0) > 0;
  if (ranged) chains.add(fw);
  for (const ip of s.lbIPs) {
    nat.push(
      `-A KUBE-SERVICES -d ${ip}/32 -p ${s.protocol} -m comment --comment "${name} loadbalancer IP" -m ${s.protocol} --dport ${s.port} -j ${ranged ? fw : ext}`,
    );
    if (ranged) {
      filter.push(
        `-A KUBE-PROXY-FIREWALL -d ${ip}/32 ${p.replace(/^-p (\S+) -m \S+/, `-p $1 -m comment --comment "${name} traffic not accepted by ${fw}" -m $1`)} -j DROP`,
      );
    }
    if (s.etp === 'Local' && local.length === 0) {
      filter.push(
        `-A KUBE-EXTERNAL-SERVICES -d ${ip}/32 -p ${s.protocol} -m comment --comment "${name} has no local endpoints" -m ${s.protocol} --dport ${s.port} -j DROP`,
      );
    }
  }
  if (ranged) {
    for (const r of s.sourceRanges!)
      nat.push(`-A ${fw} -s ${r} -m comment --comment "${name} loadbalancer IP" -j ${ext}`);
    nat.push(`-A ${fw} -m comment --comment "other traffic to ${name} will be dropped by KUBE-PROXY-FIREWALL"`);
  }
}
