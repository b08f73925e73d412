// L7-loop: an Ingress or Gateway LB keeps the client IP and proxies to the client's own node's NodePort; its new
// connection has another source port, so legs are paired by source IP (and time, with conntrack timestamps).

import type { GatewayFront, L7Vip, ServiceView } from '../cluster/types.js';
import { portKey } from '../model/service.js';
import type { DetectContext } from './context.js';
import type { FindingOf } from './core-types.js';
import type { Observations } from './correlator.js';
import type { DetectorDef } from './detector.js';
import { activeFindings, activePorts } from './observed.js';
import { lbMayTargetNode } from './path.js';
import { remedy } from './remedies.js';
import { endpointsLine, finding } from './tool-lines.js';

export const l7Loop: DetectorDef<'L7-loop'> = {
  mechanism: 'L7-loop',
  fix:
    'Enable L7 SNAT + keepalive on the LB (Tencent: by ticket; the ' +
    'LB then stops passing the client IP, read X-Forwarded-For), ' +
    'or call the backend Service by its DNS name from inside the cluster.',
  observes: ['l7'],
  readme: {
    what:
      'an L7 LB (Ingress, or Gateway API Gateway) keeps the client IP and proxies ' +
      "to a NodePort on the client's own node; it retries another backend after ~4 s",
    fix:
      'L7 SNAT + keepalive on the LB, or call the backend Service by DNS name; for a ' +
      "Gateway, its provider's ip targets, client-IP preservation off, or proxy protocol",
  },
  detect: detectL7Loop,
};

function detectL7Loop(ctx: DetectContext, obs: Observations): FindingOf<'L7-loop'>[] {
  const active = activeFindings(ctx, obs, {
    detector: l7Loop,
    pathRoles: ([out], s) => [`${frontKind(l7VipOf(s, out!.orig.dst))} VIP`, 'node NodePort'],
    labels: ['to the L7 LB VIP', 'LB re-opened to the NodePort'],
    summary: (g, [out, back]) =>
      `${g.count} request(s) from ${out!.orig.src} to ${summaryLabel(l7VipOf(g.svc, out!.orig.dst))} ` +
      `VIP ${out!.orig.dst}:${out!.orig.dport} were proxied back to this node's ` +
      `NodePort ${back!.orig.dst}:${back!.orig.dport} keeping the client IP: replies bypass the LB (4-second retries)`,
    extraEvidence: (s) => gatewaysOf(s).map((gw) => gatewayLine(s, gw)),
    extraRemedy: (s) => gatewayRemedy(gatewaysOf(s)),
  });
  const done = activePorts(active);
  const unseen = 'Whether the LB has L7 SNAT/keepalive enabled is not visible from the node.';
  const risks = ctx.services.flatMap((s) => {
    const open = s.nodePort !== undefined && !done.has(portKey(s, s.protocol, s.port)) && lbMayTargetNode(s);
    const vipRisks = (open ? s.ingressVips : []).map((iv) =>
      finding(s, 'L7-loop', 'risk', {
        summary:
          `${frontLabel(iv)} (VIP ${vipText(iv)}) proxies to NodePort ${s.nodePort}: ` +
          `pods on this node calling ${iv.ip} can be sent back to their own node`,
        evidence: [
          `${frontLabel(iv)} VIP ${vipText(iv)} → ${s.namespace}/${s.name}:${s.port} NodePort ${s.nodePort}`,
          ...(iv.gateway ? [gatewayLine(s, iv.gateway)] : []),
          endpointsLine(s),
        ],
        remedy: remedy(l7Loop, undefined, iv.gateway ? `${gatewayRemedy([iv.gateway])} ${unseen}` : unseen),
      }),
    );
    return [...unresolvedGateways(s), ...vipRisks];
  });
  return [...active, ...risks];
}

/** A Gateway hostname this node has no address for: whether pods calling it loop is unknown, not "no". */
function unresolvedGateways(service: ServiceView): FindingOf<'L7-loop'>[] {
  const out: FindingOf<'L7-loop'>[] = [];
  for (const { gateway, hostname } of service.gatewayHostnames ?? []) {
    if (service.ingressVips.some((iv) => iv.resolvedFrom === hostname && iv.ingress === gateway.gateway)) continue;
    out.push(
      finding(service, 'L7-loop', 'risk', {
        summary:
          `Gateway ${gateway.gateway} publishes only the hostname ${hostname}, which has no address on ` +
          `this node (not resolved): whether pods calling it are sent back to their own node is unknown`,
        evidence: [
          `Gateway ${gateway.gateway} address ${hostname}: no answer ` +
            `from this node's resolver (the dns source says why)`,
          gatewayLine(service, gateway),
          endpointsLine(service),
        ],
        remedy: remedy(l7Loop, undefined, gatewayRemedy([gateway])),
      }),
    );
  }
  return out;
}

/** The Ingress or Gateway address a connection went to, when the Service port has it. */
function l7VipOf(service: ServiceView, ip: string): L7Vip | undefined {
  return service.ingressVips.find((iv) => iv.ip === ip);
}

const frontKind = (iv: L7Vip | undefined): string => (iv?.gateway ? 'Gateway' : 'Ingress');

const frontLabel = (iv: L7Vip | undefined): string => (iv ? `${frontKind(iv)} ${iv.ingress}` : 'Ingress');

/** An Ingress VIP may front several Ingresses: only a Gateway address is named in the summary. */
const summaryLabel = (iv: L7Vip | undefined): string => (iv?.gateway ? frontLabel(iv) : 'Ingress');

/** The address, with the Gateway hostname it was resolved from. */
const vipText = (iv: L7Vip): string => (iv.resolvedFrom ? `${iv.ip} (${iv.resolvedFrom})` : iv.ip);

/** The Gateways that route to the Service port, each once. */
function gatewaysOf(service: ServiceView): GatewayFront[] {
  const byName = new Map<string, GatewayFront>();
  for (const iv of service.ingressVips)
    if (iv.gateway && !byName.has(iv.gateway.gateway)) byName.set(iv.gateway.gateway, iv.gateway);
  return [...byName.values()];
}

function gatewayLine(service: ServiceView, gw: GatewayFront): string {
  const listeners = gw.listeners.map((l) => `${l.port}/${l.protocol}`).join(', ');
  const controller = gw.controller ? `, controller ${gw.controller}` : '';
  return (
    `Gateway ${gw.gateway} (class ${gw.className || '(none)'}${controller}) ` +
    `listeners ${listeners}: ${gw.route} → ${service.namespace}/${service.name}:${service.port}`
  );
}

/** The Gateway-specific fix: name each Gateway, and its provider's options for the client address. */
function gatewayRemedy(gateways: GatewayFront[]): string | undefined {
  if (gateways.length === 0) return undefined;
  return gateways.map((gw) => `Gateway ${gw.gateway}: ${providerOptions(gw.controller ?? '')}`).join(' ');
}

function providerOptions(controller: string): string {
  const generic =
    'make its LB stop bringing the client address to this node: ' +
    'target type ip (pods) instead of instance (NodePorts), ' +
    'client-IP preservation off, or proxy protocol with the LB connecting from its own address.';
  if (/gateway\.k8s\.aws|eks\.amazonaws\.com/.test(controller)) {
    return (
      `${generic} AWS Load Balancer Controller: a TargetGroupConfiguration with targetType: ip, ` +
      'target group attribute preserve_client_ip.enabled=false (NLB), or proxy_protocol_v2.enabled=true.'
    );
  }
  if (/networking\.gke\.io/.test(controller))
    return `${generic} GKE: container-native (NEG) backends, the default for Gateway.`;
  if (/alibabacloud|aliyun/.test(controller)) return `${generic} Alibaba ALB: server group type Ip instead of Server.`;
  if (/tencent|tke/.test(controller))
    return `${generic} Tencent CLB: direct access to pods (ENI) and SNAT, or the CLB's proxy protocol.`;
  return generic;
}
