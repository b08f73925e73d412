// LB addresses kube-proxy leaves to the LB: ipMode Proxy (KEP-1860, no rule since 1.29) and hostname-only LBs;
// pod traffic to them loops only when the LB passes the client address through to the pod's node.
import { lbClientAddress } from '../cluster/lb-client-address.js';
import type { HostnameLookup, LbIngressIp, ServiceView } from '../cluster/types.js';

/** One line for a lookup: "LB hostname X resolved to A, B (TTL 60 s) by nameserver ...". */
export function lookupLine(lookup: HostnameLookup): string {
  const ttl = lookup.ttlS !== undefined ? `, TTL ${lookup.ttlS} s` : '';
  if (lookup.error && lookup.addresses.length > 0) {
    return (
      `LB hostname ${lookup.hostname}: lookup now fails (${lookup.error}); last answer ` +
      `${lookup.addresses.join(', ')} (at ${lookup.resolvedAt}${ttl}) by ${lookup.resolver}`
    );
  }
  if (lookup.error) return `LB hostname ${lookup.hostname}: not resolved (${lookup.error}) by ${lookup.resolver}`;
  return (
    `LB hostname ${lookup.hostname} resolved to ${lookup.addresses.join(', ')} ` +
    `(at ${lookup.resolvedAt}${ttl}) by ${lookup.resolver}`
  );
}

/** The address as findings name it: "10.0.0.5 (nlb-x.elb.amazonaws.com)" for resolved ones. */
export function vipName(service: ServiceView, ip: string): string {
  const ing = service.lbIngress.find((i) => i.ip === ip);
  return ing?.resolvedFrom ? `${ip} (${ing.resolvedFrom})` : ip;
}

/** Why kube-proxy leaves the address to the LB (`why`), the lines behind it, and the LB's client address. */
export function handoffOf(service: ServiceView, ing: LbIngressIp) {
  if (!ing.resolvedFrom && ing.ipMode !== 'Proxy') return undefined;
  const client = lbClientAddress(service.annotations.raw, service.loadBalancerClass, service.protocol);
  if (ing.resolvedFrom) {
    const l = service.lbHostnameLookups?.find((x) => x.hostname === ing.resolvedFrom);
    return {
      why: `hostname-only LB ${ing.resolvedFrom}: kube-proxy has no rule for its addresses`,
      evidence: [`status.loadBalancer.ingress: {hostname: ${ing.resolvedFrom}}`, ...(l ? [lookupLine(l)] : [])],
      client,
    };
  }
  const hostname = ing.hostname ? `, hostname: ${ing.hostname}` : '';
  return {
    why: 'ipMode: Proxy: kube-proxy (>= 1.29) leaves the address to the LB',
    evidence: [`status.loadBalancer.ingress: {ip: ${ing.ip}${hostname}, ipMode: Proxy}`],
    client,
  };
}

export function handoffVerdict(handoff: NonNullable<ReturnType<typeof handoffOf>>): string {
  const by = handoff.client.provider ? `${handoff.client.provider} ` : '';
  switch (handoff.client.kind) {
    case 'proxied':
      return (
        `the ${by}LB connects to the backends from its own address, so ` +
        `nothing comes back to this node with a pod's source: no loop`
      );
    case 'proxy-protocol':
      return `the ${by}LB proxies and carries the client address in a PROXY protocol header: no loop`;
    case 'preserved':
      return (
        `the ${by}LB passes the client address through: a connection it sends to this node ` +
        `arrives with the pod's own source and the reply bypasses the LB (loop, connection hangs)`
      );
    default:
      return (
        'whether it loops depends on the LB: a proxy or PROXY protocol does ' +
        'not loop; a pass-through LB that keeps the client address does'
      );
  }
}
