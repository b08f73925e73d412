// Hostname-only LBs become LBs with addresses: each Service port whose status
// carries only hostnames gets the addresses this node's resolver returned for
// them as LB ingress IPs (marked resolvedFrom), so every index built from the
// view (counters, conntrack prefilter and kernel filter, loop correlation,
// detectors) treats them as the VIPs they are. Pure.
import { isPrivateIp } from './annotations.js';
import type { ClusterView, HostnameLookup, LbIngressIp, ServiceView } from './types.js';

/** Every hostname the view's LB Services publish without an IP, once each. */
export function lbHostnamesOf(view: ClusterView): string[] {
  const names = new Set<string>();
  for (const s of view.services) for (const h of s.lbHostnames ?? []) names.add(h);
  return [...names].sort();
}

/**
 * The view with the lookups applied. Service ports without hostnames are the same objects; the
 * others are copies (the caller's view is never changed). Names not looked up yet get no
 * addresses and no lookup: the detectors then say the name is unresolved.
 */
export function withLbHostnames(view: ClusterView, lookups: ReadonlyMap<string, HostnameLookup>): ClusterView {
  let touched = false;
  const services = view.services.map((s): ServiceView => {
    if (!s.lbHostnames) return s;
    const found = s.lbHostnames.map((h) => lookups.get(h)).filter((l): l is HostnameLookup => l !== undefined);
    if (found.length === 0) return s;
    touched = true;
    const seen = new Set(s.lbIngress.map((i) => i.ip));
    const extra: LbIngressIp[] = [];
    for (const l of found) {
      for (const ip of l.addresses) {
        if (seen.has(ip)) continue;
        seen.add(ip);
        // ipMode does not apply to an address kube-proxy never saw; VIP is the API's default.
        extra.push({ ip, ipMode: 'VIP', hostname: l.hostname, resolvedFrom: l.hostname });
      }
    }
    const lbIngress = extra.length > 0 ? [...s.lbIngress, ...extra] : s.lbIngress;
    return {
      ...s,
      lbIngress,
      lbHostnameLookups: found,
      // As for IP LBs: internal by annotation, or when every address is one only a VPC routes.
      internalLb: s.annotations.internalByAnnotation !== undefined || (lbIngress.length > 0 && lbIngress.every((i) => isPrivateIp(i.ip))),
    };
  });
  return touched ? { ...view, services } : view;
}
