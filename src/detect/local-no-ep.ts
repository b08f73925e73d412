// local-no-ep: an ETP=Local Service seen from a node without local endpoints
// (IPVS, Kubernetes >= 1.24): the bound LB IP has no local real servers, so
// in-cluster clients are refused, or sent to remote pods with source = VIP
// and no SNAT (timeout). Active: entries VIP → VIP that never got a reply.
import type { DetectContext } from './context.js';
import type { Observations } from './correlator.js';
import { KUBE_IPVS_IFNAME, endpointsLine, finding, formatIpvs } from './evidence.js';
import { activeFindings, activePorts, portKey } from './observed.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import type { Finding } from './types.js';

export function detectLocalNoEp(ctx: DetectContext, obs: Observations): Finding[] {
  const active = activeFindings(ctx, obs, {
    kind: 'selfVip',
    mechanism: 'local-no-ep',
    labels: ['source = destination = VIP, unreplied'],
    vipOf: (ex) => ex[0]!.orig.dst,
    summary: (g, [e]) =>
      `${g.count} connection(s) with source and destination ${e!.orig.dst} got no reply: ETP=Local Service reached from a node without local endpoints`,
  });
  const done = activePorts(active);
  const risks: Finding[] = [];
  for (const s of ctx.services) {
    if (s.externalTrafficPolicy !== 'Local' || done.has(portKey(s, s.protocol, s.port))) continue;
    if (s.endpoints.some((e) => e.local && e.ready)) continue;
    for (const ing of s.lbIngress) {
      if (!ctx.ipvsBound.has(ing.ip)) continue;
      const m = mitigationsFor(ctx, s, ing.ip);
      const vs = ctx.ipvsService(ing.ip, s.protocol, s.port);
      const outcome = !vs
        ? 'is refused'
        : vs.realServers.length === 0
          ? 'is refused (virtual server without real servers)'
          : 'goes to pods on other nodes with source = VIP and no SNAT (timeouts)';
      risks.push(
        finding(
          s,
          'local-no-ep',
          credited('local-no-ep', m).length > 0 ? 'info' : 'risk',
          `no ready local endpoint for this ETP=Local Service: in-cluster traffic to ${ing.ip}:${s.port} ${outcome}`,
          [`${ing.ip} bound on ${KUBE_IPVS_IFNAME}`, endpointsLine(s), ...(vs ? formatIpvs(vs) : [`no IPVS virtual server ${s.protocol} ${ing.ip}:${s.port}`])],
          remedy('local-no-ep', m),
        ),
      );
    }
  }
  return [...active, ...risks];
}
