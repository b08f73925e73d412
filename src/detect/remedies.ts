// The mitigations credited when in place, and the remedy: a detector's fix plus the mitigations against its mechanism.
import { lbClientAddress, rewritesSource } from '../cluster/lb-client-address.js';
import type { ServiceView } from '../cluster/types.js';
import type { DetectContext } from './context.js';
import type { LbNatFact } from './core-types.js';
import type { Credit, DetectorDef } from './detector.js';

/** What remedy() reads of a detector: its fix and what it credits. */
type RemedyOf = Pick<DetectorDef, 'fix' | 'credits'>;

const DNS_NOTE =
  'Whether clients use the Service DNS name (the ClusterIP path, which never loops) is not visible from the node.';

interface Mitigations {
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

export function mitigationsFor(ctx: DetectContext, service: ServiceView, ip?: string): Mitigations {
  const ing = ip === undefined ? undefined : service.lbIngress.find((i) => i.ip === ip);
  const nat = ip === undefined ? undefined : ctx.natFact(ip, service.protocol, service.port);
  const client = lbClientAddress(service.annotations.raw, service.loadBalancerClass, service.protocol);
  return {
    ...(ip !== undefined ? { ip } : {}),
    ipModeProxy: ing?.ipMode === 'Proxy',
    ...(rewritesSource(client)
      ? { lbRewritesSource: `the LB does not pass the client address (${client.evidence.join('; ')})` }
      : {}),
    preventLoopback: service.annotations.tencentPreventLoopback === true,
    ...(service.annotations.alibabaHostname !== undefined
      ? { alibabaHostname: service.annotations.alibabaHostname }
      : {}),
    masquerade: nat?.podTraffic === 'masquerade',
    ...(nat ? { nat } : {}),
  };
}

/** AWS NLB advice: client-IP preservation is what hands a pod's connection back to its node. */
export const AWS_NLB_FIX =
  'AWS NLB: with aws-load-balancer-nlb-target-type: instance the NLB preserves ' +
  'client IPs, so a pod’s connection can be sent to its own node and hang; ' +
  'set service.beta.kubernetes.io/aws-load-balancer-target-group-attributes: ' +
  'preserve_client_ip.enabled=false (the NLB then connects from its own private address), ' +
  'or use aws-load-balancer-nlb-target-type: ip (TCP target groups do not preserve client IPs by default), ' +
  'or call the Service by its name (NAME.NAMESPACE.svc) from inside the cluster instead of the NLB hostname.';

export function isAws(service: ServiceView): boolean {
  return (
    service.loadBalancerClass === 'service.k8s.aws/nlb' ||
    Object.keys(service.annotations.raw).some((k) => k.startsWith('service.beta.kubernetes.io/aws-load-balancer-')) ||
    (service.lbHostnames ?? []).some((h) => /\.amazonaws\.com\.?$/i.test(h))
  );
}

/** The mitigations in place that count against this detector's mechanism, as human lines. */
export function credited(detector: RemedyOf, mitigations: Mitigations | undefined): string[] {
  if (!mitigations || !detector.credits) return [];
  const lines: Record<Credit, string | undefined> = {
    ipModeProxy: mitigations.ipModeProxy ? `status.loadBalancer.ingress ipMode: Proxy on ${mitigations.ip}` : undefined,
    lbRewritesSource: mitigations.lbRewritesSource,
    preventLoopback: mitigations.preventLoopback ? 'service.cloud.tencent.com/prevent-loopback: "true"' : undefined,
    alibabaHostname:
      mitigations.alibabaHostname !== undefined
        ? `alibaba-cloud-loadbalancer-hostname: ${mitigations.alibabaHostname}`
        : undefined,
    masquerade: mitigations.masquerade
      ? `kube-proxy masquerades pod traffic to ${mitigations.ip} (ETP=Cluster SNAT to the node IP)`
      : undefined,
  };
  return detector.credits.map((c) => lines[c]).filter((l): l is string => l !== undefined);
}

/** The detector's fix, followed by what is already in place and what cannot be seen. */
export function remedy(detector: RemedyOf, mitigations?: Mitigations, extra?: string): string {
  const c = credited(detector, mitigations);
  const inPlace = c.length > 0 ? ` Already in place: ${c.join('; ')}.` : ' No mitigation seen in place.';
  return `${detector.fix}${extra ? ` ${extra}` : ''}${inPlace} ${DNS_NOTE}`;
}
