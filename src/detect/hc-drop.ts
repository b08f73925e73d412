// hc-drop: community IPVS binds the LB IP on kube-ipvs0, so health checks sourced from it are dropped as martians
// (kubernetes#79783); drops rarely reach conntrack, so active needs capture or unreplied VIP → node IP entries.

import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { Observations } from './correlator.js';
import type { DetectorDef } from './detector.js';
import { tencentPreventLoopback } from './fixes.js';
import { activeFindings, withIngressRisks } from './observed.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import { finding } from './tool-lines.js';

export const hcDrop: DetectorDef<'hc-drop'> = {
  mechanism: 'hc-drop',
  fix:
    'TKE: annotate service.cloud.tencent.com/prevent-loopback: "true" (the ' +
    'service controller moves the CLB health-check source to 100.64.0.0/10); ' +
    'or have the LB controller set status.loadBalancer.ingress[].ipMode: ' +
    'Proxy (kube-proxy >= 1.30 then does not bind the IP).',
  credits: ['preventLoopback', 'ipModeProxy'],
  observes: ['hcSrc'],
  readme: {
    what:
      "the LB IP is bound on kube-ipvs0 and the LB's health checks arrive with " +
      'it as source: dropped as martians, backends flap (kubernetes#79783)',
    fix: 'TKE prevent-loopback; `status.loadBalancer.ingress[].ipMode: Proxy`',
  },
  changes: tencentPreventLoopback,
  detect: detectHcDrop,
};

function detectHcDrop(ctx: DetectContext, obs: Observations): FindingOf<'hc-drop'>[] {
  const active = activeFindings(ctx, obs, {
    detector: hcDrop,
    labels: ['from a bound VIP, unreplied'],
    vipOf: (ex) => ex[0]!.orig.src,
    summary: (g, [e]) =>
      `${g.count} packet flow(s) arrived with source ${e!.orig.src} (an address bound ` +
      `on ${KUBE_IPVS_IFNAME}) and got no reply: LB health checks are being dropped`,
  });
  return withIngressRisks(ctx, active, (s, ing) => {
    if (!ctx.ipvsBound.has(ing.ip)) {
      // IPVS binds every ipMode VIP IP, so Proxy keeps this one off unless a guest agent's local route binds it.
      if (ctx.proxy.mode !== 'ipvs' || ing.ipMode !== 'Proxy' || ing.resolvedFrom || ctx.localRouteFor(ing.ip)) return;
      return finding(s, 'hc-drop', 'info', {
        summary:
          `${ing.ip} is not bound on ${KUBE_IPVS_IFNAME} because of ipMode: Proxy: LB ` +
          `health checks sent from ${ing.ip} reach this node as from any other address`,
        evidence: [`${ing.ip} is not bound on ${KUBE_IPVS_IFNAME}`, `LB ${ing.ip} ipMode=Proxy`],
        remedy: remedy(hcDrop, mitigationsFor(ctx, s, ing.ip)),
      });
    }
    const m = mitigationsFor(ctx, s, ing.ip);
    const mitigated = credited(hcDrop, m).length > 0;
    const hcPort = s.healthCheckNodePort ?? s.nodePort;
    return finding(s, 'hc-drop', mitigated ? 'info' : 'risk', {
      summary: mitigated
        ? `${ing.ip} is bound on ${KUBE_IPVS_IFNAME}; health checks ` +
          `from it would be dropped, but a mitigation is in place`
        : `${ing.ip} is bound on ${KUBE_IPVS_IFNAME}: LB health checks sent from ${ing.ip} ` +
          `to this node${hcPort ? ` (port ${hcPort})` : ''} are dropped as martians`,
      evidence: [`${ing.ip} bound on ${KUBE_IPVS_IFNAME}`, `LB ${ing.ip} ipMode=${ing.ipMode}`],
      remedy: remedy(hcDrop, m, 'Applies when the LB health-checks from its VIP (Tencent CLB does).'),
    });
  });
}
