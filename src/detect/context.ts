// Indexes built once per diagnosis so detectors and the correlator answer "is this ours?" in O(1); LB Services
// come from cluster/lb-index.ts.
import { LbServiceIndex } from '../cluster/lb-index.js';
import { cidrMatcher, inCidr } from '../kernel/ip.js';
import type { IpvsVirtualServer } from '../kernel/types.js';
import { type Key, key } from '../model/address-key.js';
import type { DetectContext } from './context-types.js';
import type { DiagnoseInput, LbNatFact } from './core-types.js';
import { classifyProxyMode } from './proxy-classify.js';

export type { DetectContext } from './context-types.js';

/** The detectors' indexes; `lb`: the view's LB index when the caller (the agent) has one, else built here. */
export function buildContext(input: DiagnoseInput, lb?: LbServiceIndex): DetectContext {
  const idx = lb?.view === input.cluster ? lb : new LbServiceIndex(input.cluster);
  const services = idx.services;
  const ipvs = new Map<Key, IpvsVirtualServer>();
  for (const vs of input.node.ipvs?.virtualServers ?? []) {
    if (vs.address !== undefined) ipvs.set(key(vs.address, String(vs.protocol), vs.port), vs);
  }
  const nat = new Map<Key, LbNatFact>();
  for (const f of input.nat?.lb ?? []) nat.set(key(f.ip, f.protocol, f.port), f);
  const nodeIps = new Set(input.local.nodeIps);
  const ipvsBound = new Set(input.local.ipvsIps);
  // Parsed once: isPodIp runs for every conntrack entry (a malformed CIDR from the cluster matches nothing).
  const podCidrs = cidrMatcher(input.local.podCidrs);
  const isPodIp = (ip: string): boolean => podCidrs.has(ip);
  const localRoutes = input.node.localRoutes?.routes ?? [];
  return {
    input,
    services,
    nodeIps,
    ipvsBound,
    proxy: classifyProxyMode(input, services),
    isPodIp,
    isLocalSource: (ip) => nodeIps.has(ip) || isPodIp(ip),
    lb: idx,
    ipvsService: (ip, proto, port) => ipvs.get(key(ip, proto, port)),
    natFact: (ip, proto, port) => nat.get(key(ip, proto, port)),
    // A handful of routes per node (guest agents add one per forwarded IP or alias range): a scan.
    localRouteFor: (ip) => localRoutes.find((r) => inCidr(ip, r.dst)),
  };
}
