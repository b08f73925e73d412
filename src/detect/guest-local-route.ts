// guest-local-route: an LB IP that is the node's own via a `local` route no address made (Google's guest agent
// adds `local IP dev NIC proto 66 scope host` per internal LB IP); info when kube-proxy handles the IP anyway,
// a risk when kube-proxy leaves it to the LB, since pod traffic then never leaves this node.

import type { ServiceView } from '../cluster/types.js';
import type { LocalRoute } from '../kernel/types.js';
import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { DetectorDef } from './detector.js';
import { vipName } from './handoff.js';
import { eachIngress } from './observed.js';
import { kubeProxyPath, routeLine, routeOwner } from './path.js';
import { finding } from './tool-lines.js';

export const guestLocalRoute: DetectorDef<'guest-local-route'> = {
  mechanism: 'guest-local-route',
  fix:
    'Nothing to change when kube-proxy handles the IP on the node: the route only ' +
    'lets the node accept the LB’s packets, which keep the LB IP as destination. ' +
    'When kube-proxy leaves the IP to the LB (ipMode: Proxy, no rule for it), ' +
    'traffic from this node to it stays on the node: let kube-proxy handle it ' +
    '(ipMode: VIP, which a pass-through internal LB such as ' +
    'GCE’s needs anyway), or call the Service by its DNS name. ' +
    'The guest agent stops adding routes for forwarded IPs only with ' +
    '[NetworkInterfaces] ip_forwarding = false in /etc/default/instance_configs.cfg, ' +
    'after which kube-proxy alone must take the LB’s packets.',
  observes: [],
  readme: {
    what:
      'an LB IP is local on the node through a `local` route that no address made (GCE guest ' +
      'agent: `local IP dev eth0 proto 66 scope host` for internal-LB forwarding rules), not ' +
      'through kube-ipvs0: never read as a binding (no drift, hc-drop or port-refused from it); ' +
      '`info` when kube-proxy handles the IP on the node anyway, `risk` when it leaves it to ' +
      'the LB, because pod traffic is then delivered to the node itself and never reaches the LB',
    fix:
      'nothing when kube-proxy handles the IP; else ipMode: VIP ' +
      '(a pass-through internal LB needs it), or the DNS name',
  },
  detect: detectGuestLocalRoute,
};

function detectGuestLocalRoute(ctx: DetectContext): FindingOf<'guest-local-route'>[] {
  return eachIngress(ctx.services, (s, ing) => {
    const route = ctx.localRouteFor(ing.ip);
    return route && routeFinding(ctx, s, ing.ip, route);
  });
}

function routeFinding(
  ctx: DetectContext,
  service: ServiceView,
  ip: string,
  route: LocalRoute,
): FindingOf<'guest-local-route'> {
  const bound = ctx.ipvsBound.has(ip);
  const kp = kubeProxyPath(ctx, service, ip);
  const healthCheckNote =
    route.protocol === '66' ? ': harmless for GCE health checks, which come from 35.191.0.0/16 and 130.211.0.0/22' : '';
  const evidence = [
    routeLine(route),
    // IPVS mode: kubeProxyPath already says whether the IP is on kube-ipvs0.
    ...(ctx.proxy.mode === 'ipvs'
      ? []
      : [
          `${ip} ${bound ? 'is also' : 'is not'} bound on ${KUBE_IPVS_IFNAME}` +
            `${ctx.input.node.addresses ? '' : ' (addresses not read)'}`,
        ]),
    ...kp.evidence,
    `packets arriving with source ${ip} are dropped as martians here (the address is local)${healthCheckNote}`,
  ];
  const what =
    `${vipName(service, ip)} is local on this node through ${routeOwner(route)}, ` +
    `${bound ? `besides its address on ${KUBE_IPVS_IFNAME}` : `not through ${KUBE_IPVS_IFNAME}`}`;
  if (kp.leaves === false) {
    return finding(service, 'guest-local-route', 'info', {
      summary:
        `${what}: kube-proxy handles ${ip}:${service.port} on the node anyway, so the route ` +
        `only lets the node accept the LB's packets for it; it is not a kube-ipvs0 binding`,
      evidence,
      remedy: guestLocalRoute.fix,
    });
  }
  const vs = ctx.input.node.ipvs !== undefined ? ctx.ipvsService(ip, service.protocol, service.port) : undefined;
  const where = vs
    ? 'to IPVS on this node (its virtual server takes it at LOCAL_IN)'
    : 'to this node itself (a local listener, or refused)';
  return finding(service, 'guest-local-route', kp.leaves === true ? 'risk' : 'info', {
    summary:
      `${what}: kube-proxy ${kp.leaves === true ? 'leaves' : 'may leave'} ${ip}:${service.port} ` +
      `to the LB, but the route delivers pod traffic to it ${where}: it never reaches the LB`,
    evidence,
    remedy: guestLocalRoute.fix,
  });
}
