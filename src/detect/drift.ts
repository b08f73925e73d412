// drift: kube-ipvs0 binding disagrees with the Service: ipMode Proxy or Alibaba's hostname annotation mean
// "do not bind", Tencent prevent-loopback means "bind" (TKE binds when annotated); community binds every VIP ipMode.
import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { DetectorDef } from './detector.js';
import { eachIngress } from './observed.js';
import { finding } from './tool-lines.js';

export const drift: DetectorDef<'drift'> = {
  mechanism: 'drift',
  fix: 'Bring kube-proxy and the Service in line: each finding names the version, annotation or sync that disagrees.',
  observes: [],
  readme: {
    what:
      'IPVS mode: what is bound on kube-ipvs0 disagrees with what the Service ' +
      'asks for (ipMode: Proxy or the Alibaba hostname annotation bound anyway, ' +
      'Tencent prevent-loopback not bound, other LB IPs bound but not this one)',
    fix:
      'kube-proxy >= 1.30 for ipMode; the CCM or TKE kube-proxy version the ' +
      'annotation needs; kube-proxy logs and a restart for a failed sync',
  },
  detect: detectDrift,
};

function detectDrift(ctx: DetectContext): FindingOf<'drift'>[] {
  if (ctx.proxy.mode !== 'ipvs') return [];
  return eachIngress(ctx.services, (s, ing) => {
    // Resolved from a hostname: kube-proxy never saw the address, there is nothing to drift from.
    if (ing.resolvedFrom) return;
    const bound = ctx.ipvsBound.has(ing.ip);
    const state = `${ing.ip} ${bound ? 'is' : 'is not'} bound on ${KUBE_IPVS_IFNAME}`;
    const risk = (summary: string, because: string, fix: string): FindingOf<'drift'> =>
      finding(s, 'drift', 'risk', { summary, evidence: [state, because], remedy: fix });
    if (bound && ing.ipMode === 'Proxy') {
      return risk(
        `${ing.ip} has ipMode: Proxy but kube-proxy bound it: traffic ` +
          `is short-circuited on the node instead of going to the LB`,
        `status.loadBalancer.ingress: {ip: ${ing.ip}, ipMode: Proxy}`,
        'Upgrade kube-proxy to >= 1.30 (honours ipMode, KEP-1860) or remove the stale address from kube-ipvs0.',
      );
    }
    if (bound && s.annotations.alibabaHostname !== undefined) {
      return risk(
        `${ing.ip} is bound although the Alibaba hostname annotation asks kube-proxy to leave it to the LB`,
        `service.beta.kubernetes.io/alibaba-cloud-loadbalancer-hostname: ${s.annotations.alibabaHostname}`,
        'Check the CCM version (>= 2.3.0 honours the annotation) and ' +
          'that status.loadBalancer.ingress carries the hostname only.',
      );
    }
    if (!bound && s.annotations.tencentPreventLoopback === true) {
      return risk(
        `${ing.ip} carries prevent-loopback but kube-proxy did ` +
          `not bind it: the annotation has no effect on this node`,
        'service.cloud.tencent.com/prevent-loopback: "true"',
        'Upgrade the TKE kube-proxy image to a version that supports ' +
          'prevent-loopback (e.g. v1.18.4-tke.20 or later for 1.18).',
      );
    }
    if (
      !bound &&
      ing.ipMode === 'VIP' &&
      ctx.proxy.lbBinding === 'mixed' &&
      s.annotations.alibabaHostname === undefined
    ) {
      return risk(
        `kube-proxy binds other LB IPs on this node but not ${ing.ip}: stale or failed sync`,
        `LB binding on this node: ${ctx.proxy.evidence.filter((e) => e.startsWith('LB IPs')).join('; ')}`,
        'Check kube-proxy logs on this node for sync errors; restart kube-proxy to rebuild kube-ipvs0.',
      );
    }
  });
}
