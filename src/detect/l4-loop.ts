// L4-loop: pod→LB-IP traffic leaves the node (IPVS without LB-IP binding,
// no kube-proxy rule for the IP, ipMode: Proxy, a hostname-only LB), the LB
// forwards it unchanged to this node's NodePort, and the reply goes straight
// to the pod. Active: the correlator paired the two conntrack entries of the
// same pod:p. Risk: the path leaves the node and nothing rewrites the source.
import type { ServiceView } from '../cluster/types.js';
import type { DetectContext } from './context.js';
import type { Observations } from './correlator.js';
import { endpointsLine, finding } from './evidence.js';
import { handoffOf, handoffVerdict, lookupLine, vipName } from './handoff.js';
import { activeFindings, activePorts, portKey } from './observed.js';
import { lbMayTargetNode, vipPath } from './path.js';
import { AWS_NLB_FIX, credited, isAws, mitigationsFor, remedy } from './remedies.js';
import type { Finding } from './types.js';

export function detectL4Loop(ctx: DetectContext, obs: Observations): Finding[] {
  const active = activeFindings(ctx, obs, {
    kind: 'l4',
    mechanism: 'L4-loop',
    pathRoles: ['LB VIP', 'node NodePort'],
    labels: ['outbound', 'return leg from the uplink'],
    vipOf: (ex) => ex[0]!.orig.dst,
    summary: (g, [out, back]) =>
      `${g.count} connection(s) from this node to ${vipName(g.svc, out!.orig.dst)}:${out!.orig.dport} came back from the LB to ` +
      `${back!.orig.dst}:${back!.orig.dport} with the client's own source ${out!.orig.src}: the LB looped them to their own node`,
    extraEvidence: (s) => lookupsOf(s),
    extraRemedy: (s) => (isAws(s) ? AWS_NLB_FIX : undefined),
  });
  const done = activePorts(active);
  const risks: Finding[] = [];
  for (const s of ctx.services) {
    if (s.protocol === 'SCTP' || done.has(portKey(s, s.protocol, s.port))) continue;
    if (!s.internalLb || !lbMayTargetNode(s)) continue;
    for (const ing of s.lbIngress) {
      const path = vipPath(ctx, s, ing.ip);
      if (!path.leaves) continue;
      const m = mitigationsFor(ctx, s, ing.ip);
      const mitigated = credited('L4-loop', m).length > 0;
      const handoff = handoffOf(s, ing);
      const evidence = [
        ...ctx.proxy.evidence,
        ...path.evidence,
        ...(handoff ? [...handoff.evidence, ...handoff.client.evidence] : []),
        `internal LB ${ing.ip}:${s.port}/${s.protocol} → NodePort ${s.nodePort ?? '(none)'}`,
        endpointsLine(s),
      ];
      const where = `pod traffic to ${vipName(s, ing.ip)}:${s.port}`;
      const others = credited('L4-loop', m).filter((c) => !c.startsWith('the LB does not pass'));
      const summary = handoff
        ? `${where} goes to the LB (${handoff.why}); ${handoffVerdict(handoff)}${others.length > 0 ? `; mitigated on this node: ${others.join('; ')}` : ''}`
        : mitigated
          ? `${where} leaves the node to the LB, but a mitigation is in place`
          : `${where} leaves the node; the LB can send it back to this node without SNAT (connection hangs)`;
      const extra = isAws(s) ? AWS_NLB_FIX : undefined;
      risks.push(finding(s, 'L4-loop', mitigated ? 'info' : 'risk', summary, evidence, remedy('L4-loop', m, extra)));
    }
  }
  return [...active, ...risks, ...unresolved(ctx, done)];
}

function lookupsOf(s: ServiceView): string[] {
  return (s.lbHostnameLookups ?? []).map(lookupLine);
}

/**
 * Hostname-only LBs this node could not resolve: no address, so no counter and no conntrack
 * match; the finding says the loop question is open (unknown, not "no loop").
 */
function unresolved(ctx: DetectContext, done: Set<string>): Finding[] {
  const out: Finding[] = [];
  for (const s of ctx.services) {
    if (!s.lbHostnames || s.type !== 'LoadBalancer' || done.has(portKey(s, s.protocol, s.port))) continue;
    for (const h of s.lbHostnames) {
      const l = s.lbHostnameLookups?.find((x) => x.hostname === h);
      if (l && l.addresses.length > 0) continue;
      const why = l ? `lookup failed: ${l.error ?? 'no address'}` : 'not looked up on this node (no DNS answers in this input)';
      out.push(
        finding(
          s,
          'L4-loop',
          s.annotations.internalByAnnotation ? 'risk' : 'info',
          `hostname-only LB ${h}: ${why}; its addresses are unknown, so pod traffic to it can be neither counted nor told looping or not`,
          [`status.loadBalancer.ingress: {hostname: ${h}}`, ...(l ? [lookupLine(l)] : []), ...(s.annotations.internalByAnnotation ? [`${s.annotations.internalByAnnotation.key}: "${s.annotations.internalByAnnotation.value}"`] : [])],
          remedy('L4-loop', mitigationsFor(ctx, s), isAws(s) ? AWS_NLB_FIX : undefined),
        ),
      );
    }
  }
  return out;
}
