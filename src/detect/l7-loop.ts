// L7-loop: an L7 (Ingress) LB keeps the client IP and proxies to the
// NodePort of the client's own node. The LB opens a new TCP connection, so
// the return leg has another source port: the correlator pairs the two legs
// by source IP (and time, when conntrack timestamps are on).
import type { DetectContext } from './context-types.js';
import type { Observations } from './correlator.js';
import { endpointsLine, finding } from './evidence.js';
import { activeFindings, activePorts } from './observed.js';
import { portKey } from '../model/service.js';
import { lbMayTargetNode } from './path.js';
import { remedy } from './remedies.js';
import type { FindingOf } from './core-types.js';
import type { DetectorDef } from './detector.js';

export const l7Loop: DetectorDef<'L7-loop'> = {
  mechanism: 'L7-loop',
  fix:
    'Enable L7 SNAT + keepalive on the LB (Tencent: by ticket; the LB then stops passing the client IP, read X-Forwarded-For), ' +
    'or call the backend Service by its DNS name from inside the cluster.',
  credits: [],
  observes: ['l7'],
  readme: {
    what: "an L7 (Ingress) LB keeps the client IP and proxies to a NodePort on the client's own node; it retries another backend after ~4 s",
    fix: "L7 SNAT + keepalive on the LB, or call the backend Service by DNS name",
  },
  detect: detectL7Loop,
};

function detectL7Loop(ctx: DetectContext, obs: Observations): FindingOf<'L7-loop'>[] {
  const active = activeFindings(ctx, obs, {
    detector: l7Loop,
    pathRoles: ['Ingress VIP', 'node NodePort'],
    labels: ['to the Ingress VIP', 'LB re-opened to the NodePort'],
    summary: (g, [out, back]) =>
      `${g.count} request(s) from ${out!.orig.src} to Ingress VIP ${out!.orig.dst}:${out!.orig.dport} were proxied back to this node's ` +
      `NodePort ${back!.orig.dst}:${back!.orig.dport} keeping the client IP: replies bypass the LB (4-second retries)`,
  });
  const done = activePorts(active);
  const risks: FindingOf<'L7-loop'>[] = [];
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
          remedy(l7Loop, undefined, 'Whether the LB has L7 SNAT/keepalive enabled is not visible from the node.'),
        ),
      );
    }
  }
  return [...active, ...risks];
}
