// Gives hostname-only LBs the addresses this node's resolver returned (marked resolvedFrom), and Gateway hostnames
// their L7 VIPs, so every index treats them as VIPs. Pure.
import { byText } from '../compare.js';
import { isInternalLb } from './annotations.js';
import { pushTo } from './objects.js';
import type { ClusterView, HostnameLookup, L7Vip, LbIngressIp, ServiceView } from './types.js';

/** Hostnames without IP, in cap order (--dns-max-names): cloud-written first, namespaces taking turns. */
export function lbHostnamesOf(view: ClusterView): string[] {
  const written = new Map<string, string[]>();
  const chosen = new Map<string, string[]>();
  const seen = new Set<string>();
  const services = view.services
    .filter((s) => s.lbHostnames || s.gatewayHostnames)
    .sort((a, b) => byText(a.namespace, b.namespace) || byText(a.name, b.name) || a.port - b.port);
  for (const s of services) {
    const userChosen = new Set(s.chosenLbHostnames ?? []);
    // A Gateway's hostname is its controller's word, as a Service's status hostname is the cloud's.
    const gatewayNames = (s.gatewayHostnames ?? []).map((g) => g.hostname);
    for (const h of [...(s.lbHostnames ?? []), ...gatewayNames]) {
      if (seen.has(h)) continue;
      seen.add(h);
      pushTo(userChosen.has(h) ? chosen : written, s.namespace, h);
    }
  }
  return [...inTurns(written), ...inTurns(chosen)];
}

/** Each namespace's first name, then each one's second, and so on (namespaces in name order). */
function inTurns(byNamespace: Map<string, string[]>): string[] {
  const queues = [...byNamespace].sort(([a], [b]) => byText(a, b)).map(([, names]) => names);
  const out: string[] = [];
  const longest = Math.max(0, ...queues.map((q) => q.length));
  for (let turn = 0; turn < longest; turn++) for (const q of queues) if (turn < q.length) out.push(q[turn]!);
  return out;
}

/** The view with lookups applied, copying only changed ports; names not looked up yet are reported unresolved. */
export function withLbHostnames(view: ClusterView, lookups: ReadonlyMap<string, HostnameLookup>): ClusterView {
  const services = view.services.map((s) =>
    withServiceHostnames(s.gatewayHostnames ? withGatewayHostnames(s, lookups) : s, lookups),
  );
  return services.some((s, i) => s !== view.services[i]) ? { ...view, services } : view;
}

/** The Gateway hostnames' addresses as that Gateway's L7 VIPs (each address once per Gateway). */
function withGatewayHostnames(service: ServiceView, lookups: ReadonlyMap<string, HostnameLookup>): ServiceView {
  const seen = new Set(service.ingressVips.map((iv) => `${iv.ingress}|${iv.ip}`));
  const extra: L7Vip[] = [];
  for (const { gateway, hostname } of service.gatewayHostnames ?? []) {
    for (const ip of lookups.get(hostname)?.addresses ?? []) {
      const k = `${gateway.gateway}|${ip}`;
      if (seen.has(k)) continue;
      seen.add(k);
      extra.push({ ingress: gateway.gateway, ip, gateway, resolvedFrom: hostname });
    }
  }
  return extra.length > 0 ? { ...service, ingressVips: [...service.ingressVips, ...extra] } : service;
}

/** A Service's own status hostnames' addresses as its LB ingress IPs. */
function withServiceHostnames(service: ServiceView, lookups: ReadonlyMap<string, HostnameLookup>): ServiceView {
  if (!service.lbHostnames) return service;
  const found = service.lbHostnames.map((h) => lookups.get(h)).filter((l): l is HostnameLookup => l !== undefined);
  if (found.length === 0) return service;
  const seen = new Set(service.lbIngress.map((i) => i.ip));
  const extra: LbIngressIp[] = [];
  for (const l of found) {
    for (const ip of l.addresses) {
      if (seen.has(ip)) continue;
      seen.add(ip);
      // ipMode does not apply to an address kube-proxy never saw; VIP is the API's default.
      extra.push({ ip, ipMode: 'VIP', hostname: l.hostname, resolvedFrom: l.hostname });
    }
  }
  const lbIngress = extra.length > 0 ? [...service.lbIngress, ...extra] : service.lbIngress;
  return {
    ...service,
    lbIngress,
    lbHostnameLookups: found,
    internalLb: isInternalLb(service.annotations, lbIngress),
  };
}
