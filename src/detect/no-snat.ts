// no-SNAT: with externalTrafficPolicy=Local kube-proxy exempts pod→LB-IP
// traffic from KUBE-MARK-MASQ (iptables KUBE-XLB/KUBE-EXT, IPVS
// KUBE-LOAD-BALANCER-LOCAL), so the LB sees the pod IP and its own
// anti-loopback cannot tell the packet came from a backend node.
import type { DetectContext } from './context.js';
import type { Observations } from './correlator.js';
import { endpointsLine, finding } from './evidence.js';
import { activeFindings, activePorts, portKey } from './observed.js';
import { vipPath } from './path.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import type { Finding } from './types.js';

export function detectNoSnat(ctx: DetectContext, obs: Observations): Finding[] {
  const active = activeFindings(ctx, obs, {
    kind: 'noSnat',
    mechanism: 'no-SNAT',
    labels: ['not SNATed'],
    vipOf: (ex) => ex[0]!.orig.dst,
    harmlessWhenCredited: true,
    summary: (g, [e]) =>
      `${g.count} connection(s) from pods to ${e!.orig.dst}:${e!.orig.dport} left the node with the pod's own source ` +
      `(reply destination ${e!.reply.dst} = original source): the LB cannot recognise them as coming from a backend`,
  });
  const done = activePorts(active);
  const risks: Finding[] = [];
  for (const s of ctx.services) {
    if (s.externalTrafficPolicy !== 'Local' || done.has(portKey(s, s.protocol, s.port))) continue;
    for (const ing of s.lbIngress) {
      const path = vipPath(ctx, s, ing.ip);
      if (!path.leaves) continue;
      const m = mitigationsFor(ctx, s, ing.ip);
      if (m.masquerade) continue; // the rules masquerade after all: nothing to report
      const exempt = m.nat?.podTraffic === 'exempt';
      if (!exempt && ctx.input.nat !== undefined) continue; // rules were read and do not show the exemption
      const ruleEvidence = exempt
        ? m.nat!.evidence
        : ['NAT rules not read: kube-proxy normally exempts ETP=Local LB traffic from KUBE-MARK-MASQ'];
      risks.push(
        finding(
          s,
          'no-SNAT',
          credited('no-SNAT', m).length > 0 ? 'info' : 'risk',
          `externalTrafficPolicy=Local: pod traffic to ${ing.ip}:${s.port} leaves the node without SNAT`,
          [...path.evidence, ...ruleEvidence, endpointsLine(s)],
          remedy('no-SNAT', m),
        ),
      );
    }
  }
  return [...active, ...risks];
}
