// direct-pod: the LB targets pod IPs (ENI / VPC-CNI); a client pod on a target pod's node gets its connection
// delivered from the uplink straight to the local pod, and the reply bypasses the LB.

import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { Observations } from './correlator.js';
import type { DetectorDef } from './detector.js';
import { activeFindings, withIngressRisks } from './observed.js';
import { podTargetAnnotation, vipPath } from './path.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import { endpointsLine, finding } from './tool-lines.js';

export const directPod: DetectorDef<'direct-pod'> = {
  mechanism: 'direct-pod',
  fix:
    'Call the Service by DNS name; or keep client pods off the nodes of the LB’s target pods (anti-affinity); ' +
    'or register nodes (NodePort, ETP=Cluster) instead of pods as LB backends.',
  credits: ['lbRewritesSource'],
  observes: ['direct'],
  readme: {
    what: 'the LB targets pod IPs (ENI/VPC-CNI) and client and server pods share a node',
    fix: 'DNS name; anti-affinity; node (NodePort) backends',
  },
  detect: detectDirectPod,
};

function detectDirectPod(ctx: DetectContext, obs: Observations): FindingOf<'direct-pod'>[] {
  const active = activeFindings(ctx, obs, {
    detector: directPod,
    pathRoles: ['LB VIP', 'server pod (LB target)'],
    labels: ['outbound', 'return leg to the local pod'],
    summary: (g, [out, back]) =>
      `${g.count} connection(s) from ${out!.orig.src} to ${out!.orig.dst}:` +
      `${out!.orig.dport} came back from the LB straight to the local pod ` +
      `${back!.orig.dst}:${back!.orig.dport}: client and target pod share this node`,
  });
  return withIngressRisks(ctx, active, (s, ing) => {
    const annotation = podTargetAnnotation(s);
    if (!annotation || !s.endpoints.some((e) => e.local && e.ready)) return;
    const path = vipPath(ctx, s, ing.ip);
    if (path.leaves === false) return;
    const m = mitigationsFor(ctx, s, ing.ip);
    const mitigated = credited(directPod, m).length > 0;
    return finding(s, 'direct-pod', mitigated ? 'info' : 'risk', {
      summary: mitigated
        ? `the LB targets pods directly and a target pod runs on this node, but the LB ` +
          `connects from its own address: pods here calling ${ing.ip}:${s.port} are not looped`
        : `the LB targets pods directly and a target pod runs on this ` +
          `node: pods here calling ${ing.ip}:${s.port} can be looped to it`,
      evidence: [annotation, ...path.evidence, endpointsLine(s)],
      remedy: remedy(directPod, m),
    });
  });
}
