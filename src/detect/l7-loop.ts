// L7-loop: an L7 (Ingress) LB keeps the client IP and proxies to the
// NodePort of the client's own node. The LB opens a new TCP connection, so
// the return leg has another source port: the correlator pairs the two legs
// by source IP (and time, when conntrack timestamps are on).
import type { DetectContext } from './context.js';
import type { Observations } from './correlator.js';
import { endpointsLine, finding } from './evidence.js';
import { activeFindings, activePorts, portKey } from './observed.js';
import { lbMayTargetNode } from './path.js';
import { remedy } from './remedies.js';
import type { Finding } from './types.js';

export function detectL7Loop(ctx: DetectContext, obs: Observations): Finding[] {
  const active = activeFindings(ctx, obs, {
    kind: 'l7',
    mechanism: 'L7-loop',
    pathRoles: ['Ingress VIP', 'node NodePort'],
    labels: ['to the Ingress VIP', 'LB re-opened to the NodePort'],
    summary: (g, [out, back]) =>
      `${g.count} request(s) from ${out!.orig.src} to Ingress VIP ${out!.orig.dst}:${out!.orig.dport} were proxied back to this node's ` +
      `NodePort ${back!.orig.dst}:${back!.orig.dport} keeping the client IP: replies bypass the LB (4-second retries)`,
  });
  const done = activePorts(active);
  const risks: Finding[] = [];
  for (const s of ctx.services) {
    if (s.ingressVips.length === 0 || s.nodePort === undefined || done.has(portKey(s, s.protocol, s.port))) continue;
    if (!lbMayTargetNode(s)) continue;
    for (const iv of s.ingressVips) {
      risks.push(
        finding(
          s,
          'L7-loop',
          'risk',
          `Ingress ${iv.ingress} (VIP ${iv.ip}) proxies to NodePort ${s.nodePort}: pods on this node calling ${iv.ip} can be sent back to their own node`,
          [`Ingress ${iv.ingress} VIP ${iv.ip} → ${s.namespace}/${s.name}:${s.port} NodePort ${s.nodePort}`, endpointsLine(s)],
          remedy('L7-loop', undefined, 'Whether the LB has L7 SNAT/keepalive enabled is not visible from the node.'),
        ),
      );
    }
  }
  return [...active, ...risks];
}
