// local-no-ep: ETP=Local without local endpoints. IPVS (>= 1.24): clients refused or reach remote pods from the VIP
// unSNATed; nftables v1.31-early v1.33 (kubernetes#131765, fixed #132456) drops host-network clients before DNAT;
// iptables (1.24+): KUBE-EXTERNAL-SERVICES drops the LB IP while pods are short-circuited.

import { usableLocally } from '../cluster/endpoints.js';
import type { ServiceView } from '../cluster/types.js';
import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { Observations } from './correlator.js';
import type { DetectorDef } from './detector.js';
import { etpCluster } from './fixes.js';
import { activeFindings, withIngressRisks } from './observed.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import { endpointsLine, finding, formatIpvs } from './tool-lines.js';

const FIX_START =
  'Call the Service by DNS name; or use externalTrafficPolicy: Cluster; or ' +
  'run a backend on every node with clients (DaemonSet or topology spread); ';

export const localNoEp: DetectorDef<'local-no-ep'> = {
  mechanism: 'local-no-ep',
  fix:
    `${FIX_START}ipMode: Proxy or the Alibaba hostname annotation keeps the IP off kube-ipvs0 ` +
    'so traffic goes through the LB.',
  credits: ['ipModeProxy', 'alibabaHostname'],
  observes: ['selfVip'],
  readme: {
    what:
      'ETP=Local on a node without local endpoints. IPVS: refused, or sent to remote pods with source ' +
      '= VIP. iptables (1.24+): `KUBE-EXTERNAL-SERVICES` drops external traffic ("has no local ' +
      'endpoints") while pods are short-circuited (`info`). nftables: the LB IP is in kube-proxy\'s ' +
      "`no-endpoint-services` map with `drop`; pods are short-circuited to other nodes' endpoints " +
      '(`info`), but kube-proxy v1.31 to early v1.33 looks the map up from `filter-output` at priority ' +
      '-110, before DNAT, and drops every host-network client on the node (`risk`, kubernetes#131765)',
    fix:
      'DNS name; ETP=Cluster; a backend on every client node; ipMode: Proxy; on nftables ' +
      'v1.31-v1.33: a kube-proxy with #132456 (v1.34, or the 1.33 cherry-pick #133969)',
  },
  changes: (s) => etpCluster(s),
  detect: detectLocalNoEp,
};

/** The fix where kube-proxy binds nothing (iptables, nftables): ipMode Proxy keeps the IP out of its rules. */
const RULES_FIX: Pick<DetectorDef, 'fix' | 'credits'> = {
  credits: localNoEp.credits,
  fix: `${FIX_START}ipMode: Proxy keeps the IP out of kube-proxy's rules so traffic goes through the LB.`,
};

const NFT_BUG =
  'kube-proxy v1.31 to early v1.33 in nftables mode (kubernetes#131765, ' +
  'fixed by #132456 in v1.34 and the 1.33 cherry-pick #133969)';

/** iptables and nftables mode: what the LB IP's "no local endpoints" drop does to clients on this node. */
function rulesFinding(ctx: DetectContext, service: ServiceView, ip: string): FindingOf<'local-no-ep'> | undefined {
  const nat = ctx.natFact(ip, service.protocol, service.port);
  const noEp = nat?.noEndpoints;
  if (!nat || !noEp || noEp.verdict !== 'drop') return undefined;
  const m = mitigationsFor(ctx, service, ip);
  const evidence = [
    ...noEp.evidence,
    ...nat.evidence.filter((l) => !noEp.evidence.includes(l)),
    endpointsLine(service),
  ];
  if (noEp.preDnatChecks.length > 0) {
    return finding(service, 'local-no-ep', 'risk', {
      summary:
        `${NFT_BUG}: ${noEp.preDnatChecks.join(', ')} looks ${ip}:${service.port} ` +
        `up in no-endpoint-services before DNAT, so host-network pods and ` +
        `processes on this node get their connections dropped (timeouts); pods in ` +
        `their own network namespace are short-circuited to endpoints on other nodes`,
      evidence,
      remedy: remedy(
        RULES_FIX,
        m,
        'Upgrade kube-proxy to a release with kubernetes#132456 (v1.34, or a 1.33 patch release ' +
          'with #133969): its filter-input/-forward/-output chains run at priority 0, after DNAT.',
      ),
    });
  }
  return finding(service, 'local-no-ep', 'info', {
    summary:
      `no ready local endpoint for this ETP=Local Service: kube-proxy drops ` +
      `external traffic to ${ip}:${service.port} arriving at this node, ` +
      `while pods here are short-circuited to endpoints on other nodes (` +
      (ctx.proxy.mode === 'nftables' ? '"short-circuit pod traffic"' : '"pod traffic for ... external destinations"') +
      `); the LB's health check takes this node out`,
    evidence,
    remedy: remedy(RULES_FIX, m),
  });
}

function detectLocalNoEp(ctx: DetectContext, obs: Observations): FindingOf<'local-no-ep'>[] {
  const active = activeFindings(ctx, obs, {
    detector: localNoEp,
    labels: ['source = destination = VIP, unreplied'],
    summary: (g, [e]) =>
      `${g.count} connection(s) with source and destination ${e!.orig.dst} got ` +
      `no reply: ETP=Local Service reached from a node without local endpoints`,
  });
  return withIngressRisks(ctx, active, (s, ing) => {
    if (s.externalTrafficPolicy !== 'Local' || s.endpoints.some((e) => e.local && e.ready)) return;
    // kube-proxy's rules show what it did with a local endpoint serving while it terminates (its fallback since 1.26).
    if (ctx.proxy.mode === 'nftables' || ctx.proxy.mode === 'iptables') return rulesFinding(ctx, s, ing.ip);
    if (usableLocally(s.endpoints)) return;
    if (!ctx.ipvsBound.has(ing.ip)) return;
    const m = mitigationsFor(ctx, s, ing.ip);
    const vs = ctx.ipvsService(ing.ip, s.protocol, s.port);
    const outcome = !vs
      ? 'is refused'
      : vs.realServers.length === 0
        ? 'is refused (virtual server without real servers)'
        : 'goes to pods on other nodes with source = VIP and no SNAT (timeouts)';
    const target = `${ing.ip}:${s.port}`;
    return finding(s, 'local-no-ep', credited(localNoEp, m).length > 0 ? 'info' : 'risk', {
      summary: `no ready local endpoint for this ETP=Local Service: in-cluster traffic to ${target} ${outcome}`,
      evidence: [
        `${ing.ip} bound on ${KUBE_IPVS_IFNAME}`,
        endpointsLine(s),
        ...(vs ? formatIpvs(vs) : [`no IPVS virtual server ${s.protocol} ${ing.ip}:${s.port}`]),
      ],
      remedy: remedy(localNoEp, m),
    });
  });
}
