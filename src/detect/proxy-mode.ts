// proxy-mode: the kube-proxy datapath (iptables/nftables, IPVS binding LB IPs, or IPVS without binding as on TKE),
// which decides the mechanisms that apply. IPVS is deprecated since v1.35 (KEP-5495), so the finding also says
// what nftables mode would change per Service.

import { usableLocally } from '../cluster/endpoints.js';
import type { ServiceView } from '../cluster/types.js';
import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import type { DetectContext, ProxyModeInfo } from './context.js';
import type { FindingOf, LbNatFact } from './core-types.js';
import type { DetectorDef } from './detector.js';
import { handoffOf, handoffVerdict, vipName } from './handoff.js';
import { eachIngress } from './observed.js';
import { vipPath } from './path.js';
import { finding } from './tool-lines.js';

export const proxyMode: DetectorDef<'proxy-mode'> = {
  mechanism: 'proxy-mode',
  fix: 'No action: context for the other findings.',
  observes: [],
  contextOnly: true,
  readme: {
    what:
      'info: which kube-proxy mode handles the LB IP (iptables, IPVS bound or ' +
      "not, nftables: whether the IP is in kube-proxy's `service-ips` map or " +
      'left to the LB), with the rules, ipset members or nft objects as evidence',
    fix:
      'on IPVS nodes: IPVS is deprecated since v1.35 (KEP-5495); the finding ' +
      'says what nftables mode would change for this Service (stops looping ' +
      'when the IP is not bound; hc-drop and port-refused go away when it is)',
  },
  detect: detectProxyMode,
};

function describe(proxyMode: ProxyModeInfo, bound: boolean, nat: LbNatFact | undefined): string {
  switch (proxyMode.mode) {
    case 'iptables':
      return `kube-proxy iptables mode: LB IPs are handled by NAT rules on the node`;
    case 'nftables':
      if (nat?.noEndpoints?.verdict === 'reject') {
        return (
          `kube-proxy nftables mode: ${nat.ip}:${nat.port} has no endpoints, so ` +
          `kube-proxy's no-endpoint-services map rejects connections to it on the node`
        );
      }
      return nat
        ? `kube-proxy nftables mode: ${nat.ip}:${nat.port} is in kube-proxy's ` +
            `service-ips map, so pod traffic to it is handled on the node`
        : `kube-proxy nftables mode: no kube-proxy map holds this LB IP:port (ipMode ` +
            `Proxy, or not synced), so pod traffic to it leaves the node for the LB`;
    case 'ipvs':
      return bound
        ? `kube-proxy IPVS mode binding LB IPs on ${KUBE_IPVS_IFNAME} (community): pod→LB traffic stays on the node`
        : `kube-proxy IPVS mode without LB-IP binding (TKE style): pod→LB traffic leaves the node towards the LB`;
    default:
      return 'kube-proxy mode unknown (no IPVS state and no kube-proxy NAT rules read)';
  }
}

const IPVS_DEPRECATED =
  'IPVS mode is deprecated since Kubernetes v1.35 (KEP-5495) and will be ' +
  'removed; nftables mode (GA since v1.33, KEP-3866) is the path forward.';

/** What nftables mode would change for this LB IP: it binds nothing, DNATs ipMode VIP and leaves Proxy to the LB. */
function underNftables(service: ServiceView, ip: string, ipMode: 'VIP' | 'Proxy', bound: boolean): string {
  if (ipMode === 'Proxy') {
    return (
      `Under nftables, unchanged for ${ip}: kube-proxy leaves ipMode Proxy addresses ` +
      `to the LB in every mode, so pod traffic still goes to the LB (it loops ` +
      `only if the LB passes connections through with the client address kept).`
    );
  }
  const out: string[] = [];
  if (!bound) {
    out.push(
      `would stop looping: ${ip}:${service.port} would be DNATed on the node from the service-ips map, ` +
        `so pod traffic no longer leaves for the LB (the L4-loop and no-SNAT risks on this node go away)`,
    );
  } else {
    out.push(
      `${ip} would no longer be bound on ${KUBE_IPVS_IFNAME}: LB health checks ` +
        `sent from ${ip} would stop being dropped as martians (hc-drop goes away)`,
      `ports of ${ip} with no Service would go out to the LB instead of being refused here (port-refused goes away)`,
    );
  }
  if (service.externalTrafficPolicy === 'Local' && !usableLocally(service.endpoints)) {
    out.push(
      `with ETP=Local and no local endpoint, pods would be short-circuited to endpoints ` +
        `on other nodes ("short-circuit pod traffic"); host-network clients are dropped ` +
        `by kube-proxy v1.31 to early v1.33 (kubernetes#131765, fixed by #132456)`,
    );
  }
  return `Under nftables: ${out.join('; ')}.`;
}

/** One info finding per LB Service port: the datapath its VIPs take from this node. */
function detectProxyMode(ctx: DetectContext): FindingOf<'proxy-mode'>[] {
  const ipvs = ctx.proxy.mode === 'ipvs';
  return eachIngress(ctx.services, (s, ing) => {
    const bound = ctx.ipvsBound.has(ing.ip);
    const ev = [...ctx.proxy.evidence];
    if (ipvs) ev.push(`${ing.ip} ${bound ? 'is' : 'is not'} bound on ${KUBE_IPVS_IFNAME}`);
    const nat = ctx.natFact(ing.ip, s.protocol, s.port);
    if (nat) ev.push(...nat.evidence);
    // ipMode: Proxy and hostname-only addresses: kube-proxy leaves them to the LB, whose client-address
    // handling decides.
    const h = vipPath(ctx, s, ing.ip).leaves !== false ? handoffOf(s, ing) : undefined;
    if (h) ev.push(...h.evidence, ...h.client.evidence);
    const base = describe(ctx.proxy, bound, nat);
    const what = h ? `${base}; ${h.why}, so pod traffic goes to the LB: ${handoffVerdict(h)}` : base;
    const remedy = ipvs
      ? `Plan the move to kube-proxy nftables mode. ${underNftables(s, ing.ip, ing.ipMode, bound)}`
      : proxyMode.fix;
    const summary = `${vipName(s, ing.ip)}:${s.port}: ${what}${ipvs ? `. ${IPVS_DEPRECATED}` : ''}`;
    return finding(s, 'proxy-mode', 'info', { summary, evidence: ev, remedy });
  });
}
