// port-refused: the LB IP is bound on kube-ipvs0, so in-cluster clients never
// reach the LB; any LB listener port with no IPVS virtual server here is
// refused (or answered by a local process listening on 0.0.0.0:port).
import type { DetectContext } from './context.js';
import type { Observations } from './correlator.js';
import { KUBE_IPVS_IFNAME, finding, formatIpvs } from './evidence.js';
import { activeFindings, activePorts, portKey } from './observed.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import type { Finding } from './types.js';

export function detectPortRefused(ctx: DetectContext, obs: Observations): Finding[] {
  const active = activeFindings(ctx, obs, {
    kind: 'refused',
    mechanism: 'port-refused',
    labels: ['answered by the node itself'],
    vipOf: (ex) => ex[0]!.orig.dst,
    summary: (g, [e]) =>
      `${g.count} connection(s) to ${e!.orig.dst}:${e!.orig.dport} (bound on ${KUBE_IPVS_IFNAME}, no IPVS virtual server) were ` +
      (e!.tcpState === 'CLOSE' ? 'refused by this node' : 'answered by a local process, not by the LB backends'),
  });
  const done = activePorts(active);
  const risks: Finding[] = [];
  const ipvsRead = ctx.input.node.ipvs !== undefined;
  for (const s of ctx.services) {
    if (done.has(portKey(s, s.protocol, s.port))) continue;
    for (const ing of s.lbIngress) {
      if (!ctx.ipvsBound.has(ing.ip)) continue;
      const m = mitigationsFor(ctx, s, ing.ip);
      const mitigated = credited('port-refused', m).length > 0;
      const vs = ctx.ipvsService(ing.ip, s.protocol, s.port);
      const bound = `${ing.ip} bound on ${KUBE_IPVS_IFNAME}`;
      if (ipvsRead && !vs) {
        const others = (ctx.input.node.ipvs?.virtualServers ?? []).filter((v) => v.address === ing.ip).flatMap(formatIpvs);
        risks.push(
          finding(
            s,
            'port-refused',
            mitigated ? 'info' : 'risk',
            `${ing.ip}:${s.port}/${s.protocol} has no IPVS virtual server on this node: in-cluster clients get "connection refused"`,
            [bound, `no IPVS virtual server ${s.protocol} ${ing.ip}:${s.port}`, ...others],
            remedy('port-refused', m),
          ),
        );
      }
      const shared = s.annotations.existingLb;
      if (shared) {
        risks.push(
          finding(
            s,
            'port-refused',
            'info',
            `${ing.ip} is a reused LB (${shared.key}) and bound here: listeners created on it outside this cluster are refused from this node`,
            [bound, `${shared.key}: ${shared.value}`],
            remedy('port-refused', m),
          ),
        );
      }
    }
  }
  return [...active, ...risks];
}
