// The fixes from domain.md, per mechanism, and the mitigations the
// diagnosis credits when they are already in place for a Service.
import { lbClientAddress, rewritesSource } from '../cluster/lb-client-address.js';
import type { ServiceView } from '../cluster/types.js';
import type { DetectContext } from './context.js';
import type { LbNatFact, Mechanism } from './types.js';

export const DNS_NOTE =
  'Whether clients use the Service DNS name (the ClusterIP path, which never loops) is not visible from the node.';

const FIX: Record<Exclude<Mechanism, 'proxy-mode' | 'drift'>, string> = {
  'L4-loop':
    'Call the Service by its DNS name or ClusterIP instead of the LB IP (or a CoreDNS rewrite of the LB name to the Service); ' +
    'TKE: annotate service.cloud.tencent.com/prevent-loopback: "true" (kube-proxy then binds the VIP locally); ' +
    'keep externalTrafficPolicy: Cluster so kube-proxy SNATs pod→LB traffic to the node IP and the LB never sends it back to this node; ' +
    'with ETP=Local, use anti-affinity so clients and backends do not share a node.',
  'L7-loop':
    'Enable L7 SNAT + keepalive on the LB (Tencent: by ticket; the LB then stops passing the client IP, read X-Forwarded-For), ' +
    'or call the backend Service by its DNS name from inside the cluster.',
  'no-SNAT':
    'Use externalTrafficPolicy: Cluster (kube-proxy then masquerades pod→LB-IP traffic and the LB’s anti-loopback works), ' +
    'or call the Service by DNS name; if ETP=Local is needed for client IPs, keep clients off backend nodes with anti-affinity.',
  'hc-drop':
    'TKE: annotate service.cloud.tencent.com/prevent-loopback: "true" (the service controller moves the CLB health-check source to 100.64.0.0/10); ' +
    'or have the LB controller set status.loadBalancer.ingress[].ipMode: Proxy (kube-proxy >= 1.30 then does not bind the IP).',
  'port-refused':
    'Use separate LBs for in-cluster Services and for listeners outside the cluster, or declare every listener port of the shared LB in a Service; ' +
    'Alibaba: service.beta.kubernetes.io/alibaba-cloud-loadbalancer-hostname keeps the IP off kube-ipvs0 (TCP/UDP may then loop); ' +
    'check for a local process listening on 0.0.0.0 at that port.',
  'local-no-ep':
    'Call the Service by DNS name; or use externalTrafficPolicy: Cluster; or run a backend on every node with clients (DaemonSet or topology spread); ' +
    'ipMode: Proxy or the Alibaba hostname annotation keeps the IP off kube-ipvs0 so traffic goes through the LB.',
  'direct-pod':
    'Call the Service by DNS name; or keep client pods off the nodes of the LB’s target pods (anti-affinity); ' +
    'or register nodes (NodePort, ETP=Cluster) instead of pods as LB backends.',
};

export interface Mitigations {
  ip?: string;
  ipModeProxy: boolean;
  /** The LB connects to backends from its own address (proxy or PROXY protocol), per its annotations: why. */
  lbRewritesSource?: string;
  preventLoopback: boolean;
  alibabaHostname?: string;
  /** kube-proxy masquerades pod→VIP:port (ETP=Cluster behaviour), per the NAT rules. */
  masquerade: boolean;
  nat?: LbNatFact;
}

type Credit = 'ipModeProxy' | 'lbRewritesSource' | 'preventLoopback' | 'alibabaHostname' | 'masquerade';

/**
 * Which mitigations count against which mechanism (domain.md; the Alibaba hostname keeps the IP
 * unbound, so TCP/UDP may still loop). ipMode: Proxy keeps the IP off the node (hc-drop,
 * port-refused, local-no-ep) but sends pod traffic to the LB, which loops unless the LB rewrites
 * the source: against the loops it is the LB's behaviour that counts.
 */
const COUNTS: Record<keyof typeof FIX, Credit[]> = {
  'L4-loop': ['lbRewritesSource', 'preventLoopback', 'masquerade'],
  'L7-loop': [],
  'no-SNAT': ['lbRewritesSource', 'masquerade'],
  'hc-drop': ['preventLoopback', 'ipModeProxy'],
  'port-refused': ['ipModeProxy', 'alibabaHostname'],
  'local-no-ep': ['ipModeProxy', 'alibabaHostname'],
  'direct-pod': ['lbRewritesSource'],
};

export function mitigationsFor(ctx: DetectContext, s: ServiceView, ip?: string): Mitigations {
  const ing = ip === undefined ? undefined : s.lbIngress.find((i) => i.ip === ip);
  const nat = ip === undefined ? undefined : ctx.natFact(ip, s.protocol, s.port);
  return {
    ...(ip !== undefined ? { ip } : {}),
    ipModeProxy: ing?.ipMode === 'Proxy',
    ...lbRewrites(s),
    preventLoopback: s.annotations.tencentPreventLoopback === true,
    ...(s.annotations.alibabaHostname !== undefined ? { alibabaHostname: s.annotations.alibabaHostname } : {}),
    masquerade: nat?.podTraffic === 'masquerade',
    ...(nat ? { nat } : {}),
  };
}

function lbRewrites(s: ServiceView): { lbRewritesSource?: string } {
  const c = lbClientAddress(s.annotations.raw, s.loadBalancerClass, s.protocol);
  return rewritesSource(c) ? { lbRewritesSource: `the LB does not pass the client address (${c.evidence.join('; ')})` } : {};
}

/**
 * AWS NLB advice (hostname-only LBs, AWS annotations): client-IP preservation is what makes the
 * NLB hand a pod's connection back to the pod's node.
 */
export const AWS_NLB_FIX =
  'AWS NLB: with aws-load-balancer-nlb-target-type: instance the NLB preserves client IPs, so a pod’s connection can be sent to its own node and hang; ' +
  'set service.beta.kubernetes.io/aws-load-balancer-target-group-attributes: preserve_client_ip.enabled=false (the NLB then connects from its own private address), ' +
  'or use aws-load-balancer-nlb-target-type: ip (TCP target groups do not preserve client IPs by default), ' +
  'or call the Service by its name (NAME.NAMESPACE.svc) from inside the cluster instead of the NLB hostname.';

export function isAws(s: ServiceView): boolean {
  return (
    s.loadBalancerClass === 'service.k8s.aws/nlb' ||
    Object.keys(s.annotations.raw).some((k) => k.startsWith('service.beta.kubernetes.io/aws-load-balancer-')) ||
    (s.lbHostnames ?? []).some((h) => /\.amazonaws\.com\.?$/i.test(h))
  );
}

/** The mitigations in place that count against this mechanism, as human lines. */
export function credited(mechanism: keyof typeof FIX, m: Mitigations | undefined): string[] {
  if (!m) return [];
  const lines: Record<Credit, string | undefined> = {
    ipModeProxy: m.ipModeProxy ? `status.loadBalancer.ingress ipMode: Proxy on ${m.ip}` : undefined,
    lbRewritesSource: m.lbRewritesSource,
    preventLoopback: m.preventLoopback ? 'service.cloud.tencent.com/prevent-loopback: "true"' : undefined,
    alibabaHostname: m.alibabaHostname !== undefined ? `alibaba-cloud-loadbalancer-hostname: ${m.alibabaHostname}` : undefined,
    masquerade: m.masquerade ? `kube-proxy masquerades pod traffic to ${m.ip} (ETP=Cluster SNAT to the node IP)` : undefined,
  };
  return COUNTS[mechanism].map((c) => lines[c]).filter((l): l is string => l !== undefined);
}

/** The fix for a mechanism, followed by what is already in place and what cannot be seen. */
export function remedy(mechanism: keyof typeof FIX, m?: Mitigations, extra?: string): string {
  const c = credited(mechanism, m);
  const inPlace = c.length > 0 ? ` Already in place: ${c.join('; ')}.` : ' No mitigation seen in place.';
  return `${FIX[mechanism]}${extra ? ` ${extra}` : ''}${inPlace} ${DNS_NOTE}`;
}
