// source-ranges: loadBalancerSourceRanges exclude this node's pods and kube-proxy enforces them on the node, so pods
// time out (iptables KUBE-PROXY-FIREWALL, KUBE-MARK-DROP before 1.25; nftables firewall-ips).

import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { DetectorDef } from './detector.js';
import { sourceRangesAddPods } from './fixes.js';
import { eachIngress } from './observed.js';
import { mitigationsFor, remedy } from './remedies.js';
import { finding } from './tool-lines.js';

export const sourceRanges: DetectorDef<'source-ranges'> = {
  mechanism: 'source-ranges',
  fix:
    'Call the Service by DNS name (NAME.NAMESPACE.svc) or ClusterIP from ' +
    'inside the cluster (loadBalancerSourceRanges do not apply there); ' +
    'or add the pod CIDR (and the node IPs, for host-network clients) to spec.loadBalancerSourceRanges.',
  observes: [],
  readme: {
    what:
      "the Service's `loadBalancerSourceRanges` leave out this node's pods, and kube-proxy enforces " +
      'them on the node: pods calling the LB IP are dropped before the LB sees them (timeouts). ' +
      "iptables: `KUBE-FW-*` then the filter table's `KUBE-PROXY-FIREWALL` (`KUBE-MARK-DROP` before " +
      '1.25); nftables: `firewall-ips` and its `firewall-*` chain; the rules are the evidence',
    fix:
      'DNS name or ClusterIP from inside the cluster; or add ' +
      'the pod CIDR (and node IPs) to `loadBalancerSourceRanges`',
  },
  changes: sourceRangesAddPods,
  detect: detectSourceRanges,
};

function detectSourceRanges(ctx: DetectContext): FindingOf<'source-ranges'>[] {
  const pods = ctx.input.local.podCidrs;
  const who = pods.length > 0 ? `pods of this node (${pods.join(', ')})` : "this node's pods";
  return eachIngress(ctx.services, (s, ing) => {
    const drop = ctx.natFact(ing.ip, s.protocol, s.port)?.sourceRangeDrop;
    if (!drop) return;
    const summary = drop.certain
      ? `loadBalancerSourceRanges leave out ${who}: kube-proxy drops their connections ` +
        `to ${ing.ip}:${s.port} on the node (timeouts), before the LB sees them`
      : `loadBalancerSourceRanges may leave out ${who}: kube-proxy drops ` +
        `connections to ${ing.ip}:${s.port} from sources outside them on the node`;
    return finding(s, 'source-ranges', drop.certain ? 'risk' : 'info', {
      summary,
      evidence: [...drop.evidence],
      remedy: remedy(sourceRanges, mitigationsFor(ctx, s, ing.ip)),
    });
  });
}
