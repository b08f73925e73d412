// direct-pod: the LB targets pod IPs (ENI / VPC-CNI modes). A client pod on
// the same node as a target pod gets its own connection delivered from the
// uplink straight to the local pod, and the reply bypasses the LB.
import type { DetectContext } from './context.js';
import type { Observations } from './correlator.js';
import { endpointsLine, finding } from './evidence.js';
import { activeFindings, activePorts, portKey } from './observed.js';
import { podTargetAnnotation, vipPath } from './path.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import type { Finding } from './types.js';

export function detectDirectPod(ctx: DetectContext, obs: Observations): Finding[] {
  const active = activeFindings(ctx, obs, {
    kind: 'direct',
    mechanism: 'direct-pod',
    pathRoles: ['LB VIP', 'server pod (LB target)'],
    labels: ['outbound', 'return leg to the local pod'],
    vipOf: (ex) => ex[0]!.orig.dst,
    summary: (g, [out, back]) =>
      `${g.count} connection(s) from ${out!.orig.src} to ${out!.orig.dst}:${out!.orig.dport} came back from the LB straight to the local pod ` +
      `${back!.orig.dst}:${back!.orig.dport}: client and target pod share this node`,
  });
  const done = activePorts(active);
  const risks: Finding[] = [];
  for (const s of ctx.services) {
    const annotation = podTargetAnnotation(s);
    if (!annotation || done.has(portKey(s, s.protocol, s.port))) continue;
    if (!s.endpoints.some((e) => e.local && e.ready)) continue;
    for (const ing of s.lbIngress) {
      const path = vipPath(ctx, s, ing.ip);
      if (path.leaves === false) continue;
      const m = mitigationsFor(ctx, s, ing.ip);
      const mitigated = credited('direct-pod', m).length > 0;
      risks.push(
        finding(
          s,
          'direct-pod',
          mitigated ? 'info' : 'risk',
          mitigated
            ? `the LB targets pods directly and a target pod runs on this node, but the LB connects from its own address: pods here calling ${ing.ip}:${s.port} are not looped`
            : `the LB targets pods directly and a target pod runs on this node: pods here calling ${ing.ip}:${s.port} can be looped to it`,
          [annotation, ...path.evidence, endpointsLine(s)],
          remedy('direct-pod', m),
        ),
      );
    }
  }
  return [...active, ...risks];
}
