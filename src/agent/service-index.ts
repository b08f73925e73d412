// Which Service port a conntrack entry or a counter sample belongs to, and
// the capture targets, from one cluster view's LB-Service index
// (cluster/lb-index.ts, shared with the diagnosis) and this node's addresses.
// Rebuilt whenever either changes; lookups are O(1).

import type { CounterSample, Proto, Targets } from '../capture/targets.js';
import { endpointPort, LbServiceIndex, l7Listeners } from '../cluster/lb-index.js';
import type { ClusterView, ServiceView } from '../cluster/types.js';
import type { LocalAddresses } from '../detect/types.js';
import type { PrefilterTargets } from '../kernel/conntrack/prefilter.js';
import { cidrMatcher } from '../kernel/ip.js';
import type { ConntrackEntry } from '../kernel/types.js';
import { type Key, key } from '../model/address-key.js';
import {
  lowerProtocolOf,
  protocolNumber,
  protocolOfNumber as protoOf,
  type ServiceProtocol,
} from '../model/protocol.js';

/**
 * The LB VIP:ports through which a Service port is reached, as the agent counts them (see
 * LbServiceIndex.vipServices): its own LB ingress IPs at its port, and the VIPs of Ingresses that
 * route to it at 80/443 TCP or of Gateways at their listeners' ports (an L7 LB; its loop comes back on the NodePort). Visited rather than
 * listed, with index loops: the index builds call this for every Service port, and under
 * --max-opt=2 (the DaemonSet's) lists per port and for-of iterator results were megabytes of
 * garbage per build at 5,000 Services (bench/cluster-heap.ts).
 */
function eachVip(s: ServiceView, visit: (ip: string, protocol: ServiceProtocol, port: number) => void): void {
  for (let i = 0; i < s.lbIngress.length; i++) visit(s.lbIngress[i]!.ip, s.protocol, s.port);
  for (let i = 0; i < s.ingressVips.length; i++)
    for (const l of l7Listeners(s.ingressVips[i]!)) visit(s.ingressVips[i]!.ip, l.protocol, l.port);
}

/** Whether `ip` is one of the Service port's VIPs, at any port. */
function hasVip(s: ServiceView, ip: string): boolean {
  let found = false;
  eachVip(s, (vip) => (found ||= vip === ip));
  return found;
}

/** How a conntrack entry relates to a Service: towards its LB VIP, its NodePort, or one of its endpoints. */
export interface EntryMatch {
  svcs: ServiceView[];
  /** The original destination is an LB VIP of these Services. */
  toVip: boolean;
}

export class ServiceIndex {
  /** Services with an LB ingress IP or behind an Ingress' VIP: the only ones whose traffic can be matched. */
  readonly services: ServiceView[];
  private readonly nodeIps: Set<string>;
  private readonly podCidrs: ReturnType<typeof cidrMatcher>;
  private readonly ipvsBound: Set<string>;

  /**
   * `lb`: the view's LB-Service index, when the caller has one (the agent hands the same one to
   * the diagnosis); built here otherwise.
   */
  constructor(
    cluster: ClusterView,
    readonly local: LocalAddresses,
    readonly lb: LbServiceIndex = new LbServiceIndex(cluster),
  ) {
    if (lb.view !== cluster) throw new Error('ServiceIndex: the LB-Service index is of another cluster view');
    this.services = lb.addressed;
    this.nodeIps = new Set([...local.nodeIps, ...local.ipvsIps]);
    this.podCidrs = cidrMatcher(local.podCidrs);
    this.ipvsBound = new Set(local.ipvsIps);
  }

  /** The address is bound on kube-ipvs0. */
  isIpvsBound(ip: string): boolean {
    return this.ipvsBound.has(ip);
  }

  isLocal(ip: string): boolean {
    return this.nodeIps.has(ip) || this.podCidrs.has(ip);
  }

  /** The Services an entry touches; undefined when none (the entry is not kept). */
  match(e: ConntrackEntry): EntryMatch | undefined {
    const proto = protoOf(e.orig.protoNum);
    if (!proto || e.orig.dport === undefined) return undefined;
    const vip = this.lb.vipServices(e.orig.dst, proto, e.orig.dport);
    if (vip) return { svcs: vip, toVip: true };
    if (this.nodeIps.has(e.orig.dst)) {
      const np = this.lb.nodePortServices(proto, e.orig.dport);
      if (np) return { svcs: np, toVip: false };
    }
    // After DNAT the reply comes from the endpoint that was chosen.
    const ep = this.lb.endpointServices(e.reply.src, proto, e.reply.sport);
    return ep ? { svcs: ep, toVip: false } : undefined;
  }

  /** The Service ports a counter sample is about (see CounterSample for what target/port mean per kind). */
  ofSample(s: CounterSample): ServiceView[] {
    const proto = s.proto.toUpperCase();
    if (s.kind === 'to_lb') {
      return s.port
        ? (this.lb.vipServices(s.target, proto, s.port) ?? [])
        : this.services.filter((v) => hasVip(v, s.target));
    }
    if (s.target === '0.0.0.0' || s.target === '::' || s.kind === 'hc_local_src') {
      const np = this.lb.nodePortServices(proto, s.port) ?? [];
      if (np.length || s.kind !== 'hc_local_src') return np;
      return this.services.filter((v) => v.protocol === proto && v.healthCheckNodePort === s.port);
    }
    return this.lb.endpointServices(s.target, proto, s.port) ?? [];
  }

  /** What the counters look for: LB VIPs, this node's prefixes, NodePorts. */
  targets(): Targets {
    const vips = new Map<Key, Targets['vips'][number]>();
    const nodePorts = new Map<Key, Targets['nodePorts'][number]>();
    const addVip = (ip: string, protocol: ServiceProtocol, port: number) =>
      vips.set(key(ip, protocol, port), { address: ip, port, proto: lowerProtocolOf(protocol) });
    const services = this.services;
    for (let k = 0; k < services.length; k++) {
      const s = services[k]!;
      const proto = lowerProtocolOf(s.protocol);
      eachVip(s, addVip);
      if (s.nodePort) nodePorts.set(key('', s.protocol, s.nodePort), { port: s.nodePort, proto });
      if (s.healthCheckNodePort)
        nodePorts.set(key('', s.protocol, s.healthCheckNodePort), { port: s.healthCheckNodePort, proto });
    }
    const localPrefixes = [
      ...this.local.podCidrs.map((cidr) => ({ cidr, bound: false })),
      ...[...this.nodeIps].map((cidr) => ({ cidr, bound: true })),
    ];
    return { vips: [...vips.values()], localPrefixes, nodePorts: [...nodePorts.values()] };
  }

  /** What match() can keep, for the decode-free conntrack pre-check (a superset of match()). */
  prefilterTargets(): PrefilterTargets {
    const t: PrefilterTargets = { vips: [], nodeIps: [...this.nodeIps], nodePorts: [], endpoints: [] };
    const addVip = (ip: string, protocol: ServiceProtocol, port: number) => {
      const protoNum = protocolNumber(protocol);
      if (protoNum !== undefined) t.vips.push({ address: ip, protoNum, port });
    };
    // Index loops, as in eachVip: 26k endpoints at 5,000 Services.
    const services = this.services;
    for (let k = 0; k < services.length; k++) {
      const s = services[k]!;
      eachVip(s, addVip);
      const protoNum = protocolNumber(s.protocol);
      if (protoNum === undefined) continue;
      if (s.nodePort) t.nodePorts.push({ protoNum, port: s.nodePort });
      const eps = s.endpoints;
      for (let i = 0; i < eps.length; i++)
        t.endpoints.push({ address: eps[i]!.address, protoNum, port: endpointPort(s, eps[i]!) });
    }
    return t;
  }

  /** The Service ports of NS/NAME (optionally only PORT). */
  find(namespace: string, name: string, port?: number): ServiceView[] {
    return this.services.filter(
      (s) => s.namespace === namespace && s.name === name && (port === undefined || s.port === port),
    );
  }
}
