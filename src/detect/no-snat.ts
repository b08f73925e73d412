// no-SNAT: with ETP=Local kube-proxy exempts pod→LB-IP traffic from KUBE-MARK-MASQ (iptables KUBE-XLB/KUBE-EXT,
// IPVS KUBE-LOAD-BALANCER-LOCAL), so the LB sees the pod IP and its anti-loopback cannot spot a backend node.

import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { Observations } from './correlator.js';
import type { DetectorDef } from './detector.js';
import { etpCluster } from './fixes.js';
import { activeFindings, withIngressRisks } from './observed.js';
import { vipPath } from './path.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import { endpointsLine, finding } from './tool-lines.js';

export const noSnat: DetectorDef<'no-SNAT'> = {
  mechanism: 'no-SNAT',
  fix:
    'Use externalTrafficPolicy: Cluster (kube-proxy then masquerades ' +
    'pod→LB-IP traffic and the LB’s anti-loopback works), ' +
    'or call the Service by DNS name; if ETP=Local is needed for ' +
    'client IPs, keep clients off backend nodes with anti-affinity.',
  credits: ['lbRewritesSource', 'masquerade'],
  observes: ['noSnat'],
  readme: {
    what:
      'externalTrafficPolicy=Local makes kube-proxy skip masquerade for ' +
      "pod→LB-IP traffic, so the LB's own anti-loopback cannot recognise the node",
    fix: 'externalTrafficPolicy: Cluster, or DNS name; anti-affinity if ETP=Local is needed',
  },
  changes: (s) => etpCluster(s),
  detect: detectNoSnat,
};

function detectNoSnat(ctx: DetectContext, obs: Observations): FindingOf<'no-SNAT'>[] {
  const active = activeFindings(ctx, obs, {
    detector: noSnat,
    labels: ['not SNATed'],
    harmlessWhenCredited: true,
    summary: (g, [e]) =>
      `${g.count} connection(s) from pods to ${e!.orig.dst}:${e!.orig.dport} left the node with the pod's own source ` +
      `(reply destination ${e!.reply.dst} = original source): the LB cannot recognise them as coming from a backend`,
  });
  return withIngressRisks(ctx, active, (s, ing) => {
    if (s.externalTrafficPolicy !== 'Local') return;
    const path = vipPath(ctx, s, ing.ip);
    if (!path.leaves) return;
    const m = mitigationsFor(ctx, s, ing.ip);
    if (m.masquerade) return; // the rules masquerade after all: nothing to report
    const exempt = m.nat?.podTraffic === 'exempt';
    if (!exempt && ctx.input.nat !== undefined) return; // rules were read and do not show the exemption
    const ruleEvidence = exempt
      ? m.nat!.evidence
      : ['NAT rules not read: kube-proxy normally exempts ETP=Local LB traffic from KUBE-MARK-MASQ'];
    return finding(s, 'no-SNAT', credited(noSnat, m).length > 0 ? 'info' : 'risk', {
      summary: `externalTrafficPolicy=Local: pod traffic to ${ing.ip}:${s.port} leaves the node without SNAT`,
      evidence: [...path.evidence, ...ruleEvidence, endpointsLine(s)],
      remedy: remedy(noSnat, m),
    });
  });
}
