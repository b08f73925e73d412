// Where pod→LB-IP traffic goes: handled by kube-proxy, delivered by a guest agent's local route, or out to the LB;
// only traffic that leaves can loop.

import type { ServiceView } from '../cluster/types.js';
import { ipFamily } from '../kernel/ip.js';
import type { LocalRoute } from '../kernel/types.js';
import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import type { DetectContext } from './context.js';

export interface VipPath {
  /** undefined: cannot tell (no IPVS state and no NAT rules were read, or not those of the IP's family). */
  leaves: boolean | undefined;
  evidence: string[];
}

/** Where the node sends pod traffic to ip:port; a guest agent's local route keeps LB-bound traffic on the node. */
export function vipPath(ctx: DetectContext, service: ServiceView, ip: string): VipPath {
  const kp = kubeProxyPath(ctx, service, ip);
  const route = kp.leaves === false ? undefined : ctx.localRouteFor(ip);
  if (!route) return kp;
  return {
    leaves: false,
    evidence: [
      ...kp.evidence,
      `${routeLine(route)}: ${ip} is local here through ${routeOwner(route)}, ` +
        `so pod traffic to it is delivered to this node, not sent to the LB`,
    ],
  };
}

/** What kube-proxy alone does with pod traffic to ip:port: handle it on the node, or leave it to the LB. */
export function kubeProxyPath(ctx: DetectContext, service: ServiceView, ip: string): VipPath {
  const nat = ctx.natFact(ip, service.protocol, service.port);
  switch (ctx.proxy.mode) {
    case 'ipvs': {
      const bound = ctx.ipvsBound.has(ip);
      return { leaves: !bound, evidence: [`${ip} ${bound ? 'is' : 'is not'} bound on ${KUBE_IPVS_IFNAME}`] };
    }
    case 'iptables':
    case 'nftables': {
      if (nat) return { leaves: !nat.interceptedLocally, evidence: nat.evidence };
      const family = ipFamily(ip);
      const unreadable = family === 0 ? undefined : ctx.input.nat?.unreadable?.[family];
      if (unreadable) {
        return { leaves: undefined, evidence: [`kube-proxy's IPv${family} rules could not be read: ${unreadable}`] };
      }
      return {
        leaves: true,
        evidence: [`no kube-proxy ${ctx.proxy.mode} rule matches ${ip}:${service.port}/${service.protocol}`],
      };
    }
    default:
      return { leaves: undefined, evidence: [] };
  }
}

/** Whether the LB may send this Service's traffic here: any node with ETP=Cluster, nodes with endpoints with Local. */
export function lbMayTargetNode(service: ServiceView): boolean {
  return service.externalTrafficPolicy === 'Cluster' || service.endpoints.some((e) => e.local);
}

/** Annotations by which an LB targets pod IPs directly (ENI / VPC-CNI modes). */
const POD_TARGET_ANNOTATIONS: [string, string][] = [
  ['service.cloud.tencent.com/direct-access', 'true'],
  ['service.beta.kubernetes.io/aws-load-balancer-nlb-target-type', 'ip'],
  ['service.beta.kubernetes.io/backend-type', 'eni'],
];

export function podTargetAnnotation(service: ServiceView): string | undefined {
  for (const [k, v] of POD_TARGET_ANNOTATIONS)
    if (service.annotations.raw[k]?.toLowerCase() === v) return `${k}: "${service.annotations.raw[k]}"`;
  return undefined;
}

/** The route as `ip route show table local` prints it. */
export function routeLine(route: LocalRoute): string {
  const host = route.dst.endsWith(route.family === 4 ? '/32' : '/128')
    ? route.dst.slice(0, route.dst.lastIndexOf('/'))
    : route.dst;
  return (
    `local ${host}${route.dev ? ` dev ${route.dev}` : ''} proto ` +
    `${route.protocol}${route.family === 4 ? ' scope host' : ''}`
  );
}

/** Who adds such routes, when the protocol tells. */
export function routeOwner(route: LocalRoute): string {
  return route.protocol === '66'
    ? 'the Google guest agent’s route for a forwarded (internal LB) IP (protocol 66, its default ethernet_proto_id)'
    : `a local route of protocol ${route.protocol} that no address made (a cloud or network agent’s)`;
}
