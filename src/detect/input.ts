// Builds a DiagnoseInput from the node snapshot, the cluster view and kube-proxy's NAT facts (src/kubeproxy/facts.ts).
import type { ClusterView } from '../cluster/types.js';
import { type KubeNatFacts, kubeNatFacts } from '../kubeproxy/facts.js';
import { serviceProtocolOf } from '../model/protocol.js';
import type { NodeSnapshot } from '../source/node-snapshot.js';
import type { DiagnoseInput, LbNatFact, NatFacts, NodeProxyMode } from './core-types.js';
import { localAddresses } from './local.js';

/** The detectors' NAT facts; "mixed" (two modes' rules) is decided by IPVS state, then by nftables Services. */
function natFactsFrom(kube: KubeNatFacts, ipvsState: boolean): NatFacts {
  const mixed: NodeProxyMode = ipvsState ? 'ipvs' : kube.nftLayouts ? 'nftables' : 'iptables';
  const mode: NodeProxyMode = kube.mode === 'mixed' ? mixed : kube.mode === 'none' ? 'unknown' : kube.mode;
  const lb: LbNatFact[] = [];
  for (const f of kube.loadBalancers) {
    const protocol = serviceProtocolOf(f.protocol);
    if (!protocol) continue;
    lb.push({
      ip: f.vip,
      port: f.port,
      protocol,
      podTraffic: f.podTraffic,
      // Only 'not-captured' is known to leave the node; an unknown walk claims nothing.
      interceptedLocally: f.capture !== 'not-captured',
      ...(f.noEndpoints ? { noEndpoints: f.noEndpoints } : {}),
      ...(f.sourceRangeDrop ? { sourceRangeDrop: f.sourceRangeDrop } : {}),
      evidence: f.evidence,
    });
  }
  return {
    proxyMode: mode,
    evidence: kube.modeEvidence,
    lb,
    ...(kube.nftLayouts ? { nftLayouts: kube.nftLayouts } : {}),
    ...(kube.unreadable ? { unreadable: kube.unreadable } : {}),
  };
}

export function diagnoseInputOf(
  node: NodeSnapshot,
  cluster: ClusterView,
  warnings: string[] = [],
): Omit<DiagnoseInput, 'conntrack'> {
  const ipvsState =
    (node.ipvs?.virtualServers.length ?? 0) > 0 || (node.addresses?.interfaces.some((i) => i.isKubeIpvs) ?? false);
  return {
    node,
    cluster,
    local: localAddresses(node.addresses, cluster.node),
    ...(node.nat || node.nft ? { nat: natFactsFrom(kubeNatFacts(node.nat, node.nft), ipvsState) } : {}),
    warnings,
  };
}
