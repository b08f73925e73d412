// L4-loop: pod→LB-IP traffic leaves the node, the LB forwards it unchanged to this node's NodePort, and the reply
// goes straight to the pod. Active: the correlator paired both entries of one pod:port; risk: the path leaves
// the node and nothing rewrites the source.

import type { ServiceView } from '../cluster/types.js';
import { portKey } from '../model/service.js';
import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { Observations } from './correlator.js';
import type { DetectorDef } from './detector.js';
import { awsPreserveClientIpOff, etpCluster, tencentPreventLoopback } from './fixes.js';
import { handoffOf, handoffVerdict, lookupLine, vipName } from './handoff.js';
import { activeFindings, activePorts, withIngressRisks } from './observed.js';
import { lbMayTargetNode, vipPath } from './path.js';
import { AWS_NLB_FIX, credited, isAws, mitigationsFor, remedy } from './remedies.js';
import { endpointsLine, finding } from './tool-lines.js';

export const l4Loop: DetectorDef<'L4-loop'> = {
  mechanism: 'L4-loop',
  fix:
    'Call the Service by its DNS name or ClusterIP instead of the ' +
    'LB IP (or a CoreDNS rewrite of the LB name to the Service); ' +
    'TKE: annotate service.cloud.tencent.com/prevent-loopback: "true" (kube-proxy then binds the VIP locally); ' +
    'keep externalTrafficPolicy: Cluster so kube-proxy SNATs pod→LB ' +
    'traffic to the node IP and the LB never sends it back to this node; ' +
    'with ETP=Local, use anti-affinity so clients and backends do not share a node.',
  // ipMode Proxy is not credited: it sends pod traffic to the LB, which loops unless the LB rewrites the source.
  credits: ['lbRewritesSource', 'preventLoopback', 'masquerade'],
  observes: ['l4'],
  readme: {
    what:
      'pod→LB-IP traffic leaves the node (IPVS mode with the LB IP not bound ' +
      'on kube-ipvs0, or iptables mode), the L4 LB keeps the client address ' +
      'and picks this node: the reply skips the LB and the connect hangs',
    fix:
      'call the Service by DNS name/ClusterIP; TKE `service.cloud.tencent.com/prevent-loopback: ' +
      '"true"`; externalTrafficPolicy: Cluster (SNAT to the node IP); ' +
      'with ETP=Local, anti-affinity between clients and backends',
  },
  changes: (s) => [...etpCluster(s), ...tencentPreventLoopback(s), ...awsPreserveClientIpOff(s)],
  detect: detectL4Loop,
};

function detectL4Loop(ctx: DetectContext, obs: Observations): FindingOf<'L4-loop'>[] {
  const active = activeFindings(ctx, obs, {
    detector: l4Loop,
    pathRoles: ['LB VIP', 'node NodePort'],
    labels: ['outbound', 'return leg from the uplink'],
    summary: (g, [out, back]) =>
      `${g.count} connection(s) from this node to ` +
      `${vipName(g.svc, out!.orig.dst)}:${out!.orig.dport} came back from the LB to ` +
      `${back!.orig.dst}:${back!.orig.dport} with the client's own ` +
      `source ${out!.orig.src}: the LB looped them to their own node`,
    extraEvidence: (s) => (s.lbHostnameLookups ?? []).map(lookupLine),
    extraRemedy: awsFix,
  });
  const found = withIngressRisks(ctx, active, (s, ing) => {
    if (s.protocol === 'SCTP' || !s.internalLb || !lbMayTargetNode(s)) return;
    const path = vipPath(ctx, s, ing.ip);
    if (!path.leaves) return;
    const m = mitigationsFor(ctx, s, ing.ip);
    const mitigated = credited(l4Loop, m).length > 0;
    const handoff = handoffOf(s, ing);
    const evidence = [
      ...ctx.proxy.evidence,
      ...path.evidence,
      ...(handoff ? [...handoff.evidence, ...handoff.client.evidence] : []),
      `internal LB ${ing.ip}:${s.port}/${s.protocol} → NodePort ${s.nodePort ?? '(none)'}`,
      endpointsLine(s),
    ];
    const where = `pod traffic to ${vipName(s, ing.ip)}:${s.port}`;
    const others = credited(l4Loop, m).filter((c) => !c.startsWith('the LB does not pass'));
    const summary = handoff
      ? `${where} goes to the LB (${handoff.why}); ${handoffVerdict(handoff)}` +
        `${others.length > 0 ? `; mitigated on this node: ${others.join('; ')}` : ''}`
      : mitigated
        ? `${where} leaves the node to the LB, but a mitigation is in place`
        : `${where} leaves the node; the LB can send it back to this node without SNAT (connection hangs)`;
    return finding(s, 'L4-loop', mitigated ? 'info' : 'risk', {
      summary,
      evidence,
      remedy: remedy(l4Loop, m, awsFix(s)),
    });
  });
  return [...found, ...unresolved(ctx, activePorts(active))];
}

function awsFix(service: ServiceView): string | undefined {
  return isAws(service) ? AWS_NLB_FIX : undefined;
}

/** Unresolved hostname-only LBs: with no address nothing can match, so the loop question is open, not "no loop". */
function unresolved(ctx: DetectContext, done: Set<string>): FindingOf<'L4-loop'>[] {
  const open = ctx.services.filter((s) => s.type === 'LoadBalancer' && !done.has(portKey(s, s.protocol, s.port)));
  return open.flatMap((s) =>
    (s.lbHostnames ?? []).flatMap((h) => {
      const l = s.lbHostnameLookups?.find((x) => x.hostname === h);
      if (l && l.addresses.length > 0) return [];
      const why = l
        ? `lookup failed: ${l.error ?? 'no address'}`
        : 'not looked up on this node (no DNS answers in this input)';
      const internal = s.annotations.internalByAnnotation;
      return finding(s, 'L4-loop', internal ? 'risk' : 'info', {
        summary:
          `hostname-only LB ${h}: ${why}; its addresses are unknown, so ` +
          `pod traffic to it can be neither counted nor told looping or not`,
        evidence: [
          `status.loadBalancer.ingress: {hostname: ${h}}`,
          ...(l ? [lookupLine(l)] : []),
          ...(internal ? [`${internal.key}: "${internal.value}"`] : []),
        ],
        remedy: remedy(l4Loop, mitigationsFor(ctx, s), awsFix(s)),
      });
    }),
  );
}
