// L4-loop: pod→LB-IP traffic leaves the node (IPVS without LB-IP binding,
// or no kube-proxy rule for the IP), the LB forwards it unchanged to this
// node's NodePort, and the reply goes straight to the pod. Active: the
// correlator paired the two conntrack entries of the same pod:p.
import type { DetectContext } from './context.js';
import type { Observations } from './correlator.js';
import { endpointsLine, finding } from './evidence.js';
import { activeFindings, activePorts, portKey } from './observed.js';
import { lbMayTargetNode, vipPath } from './path.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import type { Finding } from './types.js';

export function detectL4Loop(ctx: DetectContext, obs: Observations): Finding[] {
  const active = activeFindings(ctx, obs, {
    kind: 'l4',
    mechanism: 'L4-loop',
    pathRoles: ['LB VIP', 'node NodePort'],
    labels: ['outbound', 'return leg from the uplink'],
    vipOf: (ex) => ex[0]!.orig.dst,
    summary: (g, [out, back]) =>
      `${g.count} connection(s) from this node to ${out!.orig.dst}:${out!.orig.dport} came back from the LB to ` +
      `${back!.orig.dst}:${back!.orig.dport} with the client's own source ${out!.orig.src}: the LB looped them to their own node`,
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
      const evidence = [
        ...ctx.proxy.evidence,
        ...path.evidence,
        `internal LB ${ing.ip}:${s.port}/${s.protocol} → NodePort ${s.nodePort ?? '(none)'}`,
        endpointsLine(s),
      ];
      const summary = mitigated
        ? `pod traffic to ${ing.ip}:${s.port} leaves the node to the LB, but a mitigation is in place`
        : `pod traffic to ${ing.ip}:${s.port} leaves the node; the LB can send it back to this node without SNAT (connection hangs)`;
      risks.push(finding(s, 'L4-loop', mitigated ? 'info' : 'risk', summary, evidence, remedy('L4-loop', m)));
    }
  }
  return [...active, ...risks];
}
