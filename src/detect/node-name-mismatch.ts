// node-name-mismatch: this node's pods' endpoints are filed under another node name, so kube-proxy sees no local
// endpoint and ETP=Local traffic and health checks fail. Pods are told by address, and since IPAM may reuse the
// CIDR the rename must be node-wide; a risk when the addresses are confirmed this node's, else info.

import { slicePort } from '../cluster/endpoints.js';
import type { ServiceView } from '../cluster/types.js';
import { portKey } from '../model/service.js';
import type { DetectContext } from './context.js';
import type { DiagnoseInput, FindingOf } from './core-types.js';
import type { DetectorDef } from './detector.js';
import { endpointsLine, finding, firstOf, formatIpvs, hostPort } from './tool-lines.js';

export const nodeNameMismatch: DetectorDef<'node-name-mismatch'> = {
  mechanism: 'node-name-mismatch',
  fix:
    'Make the names agree: kube-proxy’s --hostname-override (hostnameOverride ' +
    'in its config) must be the Node name the kubelet registers, ' +
    'which the EndpointSlices carry as nodeName (v1) or topology ' +
    'kubernetes.io/hostname (v1beta1); on clouds that name nodes by FQDN ' +
    '(e.g. AWS ip-10-0-1-5.ec2.internal) use the same form, FQDN or ' +
    'short name, for the kubelet, kube-proxy and the node label; ' +
    'run clbprobe with --node-name from the downward API spec.nodeName (as deploy/daemonset.yaml does).',
  observes: [],
  readme: {
    what:
      'the EndpointSlices file the endpoints of this node’s pods (addresses in its pod CIDR or its own IPs) ' +
      'under another node name than this node’s (FQDN vs short name, a `--hostname-override`): kube-proxy ' +
      'then sees no local endpoint for ETP=Local Services, drops external traffic and fails the LB health ' +
      'check. Quiet when endpoints are merely remote, or when any endpoint is filed under this node’s name',
    fix:
      'the same name for the kubelet, kube-proxy’s `--hostname-override` ' +
      'and the node label (FQDN or short name, not both)',
  },
  detect: detectNodeNameMismatch,
};

/** Endpoint lines quoted per finding; the count says how many more. */
const MAX_QUOTED = 5;

/** This node's name, the one other name its endpoints are filed under, and why their addresses are this node's. */
type Rename = { own: string; other: string; where: string };

const renames = new WeakMap<DiagnoseInput, Rename | null>();

/** Whether this node's endpoints are filed under one other name view-wide; cached per input for agent re-runs. */
function renameOf(ctx: DetectContext): Rename | undefined {
  const input = ctx.input;
  const cached = renames.get(input);
  if (cached !== undefined) return cached ?? undefined;
  let found: Rename | null = null;
  const own = input.cluster.nodeName;
  if (own !== undefined) {
    const others = new Set<string>();
    let anyOwn = false;
    for (const s of input.cluster.services) {
      for (const ep of s.endpoints) {
        if (ep.local) anyOwn = true;
        else if (ep.nodeName !== undefined && ctx.isLocalSource(ep.address)) others.add(ep.nodeName);
      }
    }
    if (!anyOwn && others.size === 1) {
      const cidrs =
        input.local.podCidrs.length > 0 ? `pod CIDR ${input.local.podCidrs.join(', ')}` : 'no pod CIDR known';
      found = {
        own,
        other: [...others][0]!,
        where: `${cidrs}; node addresses ${[...ctx.nodeIps].join(', ') || 'unknown'}`,
      };
    }
  }
  renames.set(input, found);
  return found ?? undefined;
}

/** How the two names differ, when it is a known pattern. */
function howTheyDiffer(own: string, other: string): string | undefined {
  if (other.toLowerCase() === own.toLowerCase()) return 'the names differ only in case';
  if (other.startsWith(`${own}.`)) return `"${other}" is the FQDN of "${own}"`;
  if (own.startsWith(`${other}.`)) return `"${other}" is the short name of "${own}"`;
  return undefined;
}

/** kube-proxy's own state for this Service's LB IPs: evidence lines, and whether it shows no local endpoint. */
function kubeProxyView(
  ctx: DetectContext,
  service: ServiceView,
  mine: ServiceView['endpoints'],
): { lines: string[]; agrees: boolean } {
  const lines: string[] = [];
  let agrees = false;
  const addrs = new Set(mine.map((e) => e.address));
  for (const ing of service.lbIngress) {
    const nat = ctx.natFact(ing.ip, service.protocol, service.port);
    if (nat?.noEndpoints?.verdict === 'drop') {
      agrees = true;
      lines.push(
        `kube-proxy has no local endpoint either: ` +
          `${nat.noEndpoints.evidence.join('; ') || `${ing.ip}:${service.port} in no-endpoint-services`}`,
      );
    }
    const vs = ctx.proxy.mode === 'ipvs' ? ctx.ipvsService(ing.ip, service.protocol, service.port) : undefined;
    if (vs && !vs.realServers.some((rs) => addrs.has(rs.address))) {
      agrees = true;
      lines.push(
        `kube-proxy's IPVS virtual server for ${ing.ip}:${service.port} has none of these endpoints:`,
        ...formatIpvs(vs),
      );
    }
  }
  return { lines, agrees };
}

function detectNodeNameMismatch(ctx: DetectContext): FindingOf<'node-name-mismatch'>[] {
  const r = renameOf(ctx);
  if (!r) return [];
  const out: FindingOf<'node-name-mismatch'>[] = [];
  const seen = new Set<string>();
  for (const s of ctx.services) {
    if (s.externalTrafficPolicy !== 'Local') continue;
    const mine = s.endpoints.filter((e) => !e.local && e.nodeName === r.other && ctx.isLocalSource(e.address));
    if (mine.length === 0) continue;
    const k = portKey(s, s.protocol, s.port);
    if (seen.has(k)) continue;
    seen.add(k);
    out.push(mismatchFinding(ctx, s, r, mine));
  }
  return out;
}

function mismatchFinding(
  ctx: DetectContext,
  service: ServiceView,
  rename: Rename,
  mine: ServiceView['endpoints'],
): FindingOf<'node-name-mismatch'> {
  const ready = mine.filter((e) => e.ready);
  const quoted = mine
    .slice(0, MAX_QUOTED)
    .map(
      (e) =>
        `endpoint ${hostPort(e.address, slicePort(service, e))} (${e.ready ? 'ready' : 'not ready'}) ` +
        `filed under nodeName "${e.nodeName}", at an address of this node`,
    );
  if (mine.length > MAX_QUOTED)
    quoted.push(`(${mine.length - MAX_QUOTED} more endpoints of this node filed under "${rename.other}")`);
  const differ = howTheyDiffer(rename.own, rename.other);
  const kp = kubeProxyView(ctx, service, mine);
  const evidence = [
    `this node: "${rename.own}" (` +
      `${ctx.input.cluster.node ? 'its Node object' : 'the agent’s --node-name; no Node object of that name'}` +
      `); ${rename.where}`,
    ...quoted,
    `no endpoint of any Service is filed under "${rename.own}"`,
    ...(differ ? [differ] : []),
    ...kp.lines,
    endpointsLine(service),
  ];
  const confirmed = differ !== undefined || kp.agrees || mine.some((e) => ctx.nodeIps.has(e.address));
  const hc = service.healthCheckNodePort !== undefined ? ` (health check port ${service.healthCheckNodePort})` : '';
  const shown = firstOf(
    mine.map((e) => e.address),
    3,
  );
  const summary =
    `${mine.length} endpoint(s) of this node's pods (${shown}) are filed under ` +
    `"${rename.other}", not this node's name "${rename.own}": kube-proxy takes ` +
    `only endpoints filed under its own name as local, so this ETP=Local Service ` +
    `has no local endpoint${ready.length > 0 ? ` although ${ready.length} ready endpoint(s) run here` : ''}` +
    `: external traffic to this node is dropped and the LB health check${hc} fails`;
  if (!ctx.input.cluster.node) {
    // No Node object has this node's name: the agent's own --node-name is the likelier culprit.
    return finding(service, 'node-name-mismatch', 'info', {
      summary:
        `no Node object is named "${rename.own}" (clbprobe's --node-name) while ` +
        `the endpoints at this node's addresses are filed under "${rename.other}": ` +
        `clbprobe is probably running under the wrong name, and every ` +
        `endpoint looks remote to it; if "${rename.own}" is right, ${summary}`,
      evidence,
      remedy:
        `Run clbprobe with --node-name "${rename.other}" if that is this ` +
        `node (the DaemonSet passes spec.nodeName). ${nodeNameMismatch.fix}`,
    });
  }
  const caveat = confirmed
    ? ''
    : `; only the pod CIDR says these addresses are this node's (with IPAM that hands out ` +
      `addresses outside the Node's podCIDR, such as Calico's blocks, they may be another node's)`;
  return finding(service, 'node-name-mismatch', confirmed ? 'risk' : 'info', {
    summary: summary + caveat,
    evidence,
    remedy: nodeNameMismatch.fix,
  });
}
