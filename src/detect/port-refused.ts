// port-refused: the LB IP is bound on kube-ipvs0, so in-cluster clients never reach the LB; an LB port with no IPVS
// virtual server here is refused (or answered by a local 0.0.0.0:port listener).

import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { Observations } from './correlator.js';
import type { DetectorDef } from './detector.js';
import { activeFindings, withIngressRisks } from './observed.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import { finding, formatIpvs } from './tool-lines.js';

export const portRefused: DetectorDef<'port-refused'> = {
  mechanism: 'port-refused',
  fix:
    'Use separate LBs for in-cluster Services and for listeners outside the ' +
    'cluster, or declare every listener port of the shared LB in a Service; ' +
    'Alibaba: service.beta.kubernetes.io/alibaba-cloud-loadbalancer-hostname ' +
    'keeps the IP off kube-ipvs0 (TCP/UDP may then loop); ' +
    'check for a local process listening on 0.0.0.0 at that port.',
  // Both keep the IP off kube-ipvs0, so every port goes to the LB (TCP/UDP may then loop: L4-loop).
  credits: ['ipModeProxy', 'alibabaHostname'],
  observes: ['refused'],
  readme: {
    what:
      'the LB IP is bound on kube-ipvs0 but the (shared) LB listens on ports ' +
      'with no IPVS virtual server here: refused, or a local process answers',
    fix:
      'separate LBs, or declare every listener port in a Service; ' +
      'Alibaba hostname annotation; check local listeners',
  },
  detect: detectPortRefused,
};

function detectPortRefused(ctx: DetectContext, obs: Observations): FindingOf<'port-refused'>[] {
  const active = activeFindings(ctx, obs, {
    detector: portRefused,
    labels: ['answered by the node itself'],
    summary: (g, [e]) =>
      `${g.count} connection(s) to ${e!.orig.dst}:${e!.orig.dport} ` +
      `(bound on ${KUBE_IPVS_IFNAME}, no IPVS virtual server) were ` +
      (e!.tcpState === 'CLOSE' ? 'refused by this node' : 'answered by a local process, not by the LB backends'),
  });
  const ipvs = ctx.input.node.ipvs;
  return withIngressRisks(ctx, active, (s, ing) => {
    if (!ctx.ipvsBound.has(ing.ip)) return;
    const m = mitigationsFor(ctx, s, ing.ip);
    const bound = `${ing.ip} bound on ${KUBE_IPVS_IFNAME}`;
    const out: FindingOf<'port-refused'>[] = [];
    if (ipvs !== undefined && !ctx.ipvsService(ing.ip, s.protocol, s.port)) {
      const others = ipvs.virtualServers.filter((v) => v.address === ing.ip).flatMap(formatIpvs);
      out.push(
        finding(s, 'port-refused', credited(portRefused, m).length > 0 ? 'info' : 'risk', {
          summary:
            `${ing.ip}:${s.port}/${s.protocol} has no IPVS virtual server ` +
            `on this node: in-cluster clients get "connection refused"`,
          evidence: [bound, `no IPVS virtual server ${s.protocol} ${ing.ip}:${s.port}`, ...others],
          remedy: remedy(portRefused, m),
        }),
      );
    }
    const shared = s.annotations.existingLb;
    if (shared) {
      out.push(
        finding(s, 'port-refused', 'info', {
          summary:
            `${ing.ip} is a reused LB (${shared.key}) and bound here: listeners ` +
            `created on it outside this cluster are refused from this node`,
          evidence: [bound, `${shared.key}: ${shared.value}`],
          remedy: remedy(portRefused, m),
        }),
      );
    }
    return out;
  });
}
