// Which kube-proxy datapath this node runs and whether IPVS binds LB IPs; built once per diagnosis in context.ts.
import type { ServiceView } from '../cluster/types.js';
import type { LbBinding, ProxyModeInfo } from './context-types.js';
import type { DiagnoseInput, NodeProxyMode } from './core-types.js';
import { firstOf, KUBE_IPVS_IFNAME } from './tool-lines.js';

/** LB IPs a community kube-proxy would bind: ipMode VIP and no hostname-only status. */
function expectedBound(services: ServiceView[]): string[] {
  const ips = new Set<string>();
  for (const s of services) for (const i of s.lbIngress) if (i.ipMode === 'VIP' && !i.resolvedFrom) ips.add(i.ip);
  return [...ips];
}

/** Every finding carries this evidence, so it names a few examples rather than every LB IP. */
const MAX_LISTED = 10;

export function classifyProxyMode(input: DiagnoseInput, services: ServiceView[]): ProxyModeInfo {
  const evidence: string[] = [];
  const ifaces = input.node.addresses?.interfaces ?? [];
  const kubeIpvs = ifaces.find((i) => i.isKubeIpvs);
  const vsCount = input.node.ipvs?.virtualServers.length ?? 0;
  let mode: NodeProxyMode = input.nat?.proxyMode ?? 'unknown';
  if (input.nat && mode !== 'unknown') evidence.push(...input.nat.evidence);
  if (mode === 'unknown' && (vsCount > 0 || kubeIpvs)) mode = 'ipvs';
  if (kubeIpvs) evidence.push(`${KUBE_IPVS_IFNAME}: ${kubeIpvs.addresses.length} addresses bound`);
  if (vsCount > 0) evidence.push(`IPVS: ${vsCount} virtual servers`);
  if (mode !== 'ipvs') return { mode, evidence };
  const want = expectedBound(services);
  const onIpvs = new Set(input.local.ipvsIps);
  const bound = want.filter((ip) => onIpvs.has(ip));
  const unbound = want.filter((ip) => !onIpvs.has(ip));
  if (bound.length > 0) evidence.push(`LB IPs bound on ${KUBE_IPVS_IFNAME}: ${firstOf(bound, MAX_LISTED)}`);
  if (unbound.length > 0) evidence.push(`LB IPs not bound on ${KUBE_IPVS_IFNAME}: ${firstOf(unbound, MAX_LISTED)}`);
  const lbBinding: LbBinding =
    want.length === 0 ? 'none-expected' : unbound.length === 0 ? 'bound' : bound.length === 0 ? 'unbound' : 'mixed';
  return { mode, lbBinding, evidence };
}
