// Which Service port a conntrack entry or counter sample belongs to, and what is ours (model/ours.ts), from the view's
// LB index and this node's addresses; rebuilt when either changes.

import { type CounterSample, packetTargets, type Targets } from '../capture/targets.js';
import { endpointPort, LbServiceIndex, l7Listeners } from '../cluster/lb-index.js';
import type { ClusterView, ServiceView } from '../cluster/types.js';
import type { LocalAddresses } from '../detect/types.js';
import { cidrMatcher } from '../kernel/ip.js';
import type { ConntrackEntry } from '../kernel/types.js';
import { type AddressPort, matchTuple, type NodePort, type Ours, type OursLookup } from '../model/ours.js';
import { protocolNumber, protocolOfNumber, type ServiceProtocol } from '../model/protocol.js';

/** Visits each LB VIP:port reaching a Service port as the agent counts them (LbServiceIndex.vipServices). */
function eachVip(s: ServiceView, visit: (ip: string, protocol: ServiceProtocol, port: number) => void): void {
  for (const lb of s.lbIngress) visit(lb.ip, s.protocol, s.port);
  for (const vip of s.ingressVips) for (const l of l7Listeners(vip)) visit(vip.ip, l.protocol, l.port);
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
  /** The node's own addresses, kube-ipvs0's not among them: where a NodePort return leg arrives. */
  private readonly hostIps: Set<string>;
  private readonly podCidrs: ReturnType<typeof cidrMatcher>;
  private readonly ipvsBound: Set<string>;

  /** `lb`: the view's LB index when the caller has one to share with the diagnosis, else built here. */
  constructor(
    cluster: ClusterView,
    readonly local: LocalAddresses,
    readonly lb: LbServiceIndex = new LbServiceIndex(cluster),
  ) {
    if (lb.view !== cluster) throw new Error('ServiceIndex: the LB-Service index is of another cluster view');
    this.services = lb.addressed;
    this.nodeIps = new Set([...local.nodeIps, ...local.ipvsIps]);
    this.hostIps = new Set(local.nodeIps);
    this.podCidrs = cidrMatcher(local.podCidrs);
    this.ipvsBound = new Set(local.ipvsIps);
  }

  isIpvsBound(ip: string): boolean {
    return this.ipvsBound.has(ip);
  }

  private readonly isPodIp = (ip: string): boolean => this.podCidrs.has(ip);

  isLocal(ip: string): boolean {
    return this.nodeIps.has(ip) || this.podCidrs.has(ip);
  }

  /** The Service ports an entry is a loop's return leg of, as the correlator pairs them (LbServiceIndex.returnLeg). */
  returnLegServices(e: ConntrackEntry): ServiceView[] {
    if (!this.hostIps.has(e.orig.src) && !this.isPodIp(e.orig.src)) return [];
    const leg = this.lb.returnLeg(e, this.hostIps, this.isPodIp);
    return [...(leg.nodePort ? [leg.nodePort] : []), ...(leg.endpoints ?? [])];
  }

  /** The Services an entry touches; undefined when none (the entry is not kept). */
  match(e: ConntrackEntry): EntryMatch | undefined {
    const m = matchTuple(this.lookup, e);
    return m && { svcs: m.hit, toVip: m.rule === 'vip' };
  }

  /** The ours rule's lookups over the LB-Service index, giving the Service ports of each hit. */
  private readonly lookup: OursLookup<string, ServiceView[]> = {
    vip: (ip, protoNum, port) => this.lb.vipServices(ip, protocolOfNumber(protoNum) ?? '', port),
    isNodeIp: (ip) => this.nodeIps.has(ip),
    nodePort: (protoNum, port) => this.lb.nodePortServices(protocolOfNumber(protoNum) ?? '', port),
    endpoint: (ip, protoNum, port) => this.lb.endpointServices(ip, protocolOfNumber(protoNum) ?? '', port),
  };

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
    return packetTargets(this.ours());
  }

  /** What is ours on this node: the one description every check of flows and packets derives from. */
  ours(): Ours {
    const vips: AddressPort[] = [];
    const nodePorts: NodePort[] = [];
    const endpoints: AddressPort[] = [];
    for (const s of this.services) {
      eachVip(s, (address, protocol, port) => {
        const protoNum = protocolNumber(protocol);
        if (protoNum !== undefined) vips.push({ address, protoNum, port });
      });
      const protoNum = protocolNumber(s.protocol);
      if (protoNum === undefined) continue;
      if (s.nodePort) nodePorts.push({ protoNum, port: s.nodePort, healthCheck: false });
      if (s.healthCheckNodePort) nodePorts.push({ protoNum, port: s.healthCheckNodePort, healthCheck: true });
      for (const ep of s.endpoints) endpoints.push({ address: ep.address, protoNum, port: endpointPort(s, ep) });
    }
    return { vips, nodeIps: [...this.nodeIps], podCidrs: [...this.local.podCidrs], nodePorts, endpoints };
  }

  /** The Service ports of NS/NAME (optionally only PORT). */
  find(namespace: string, name: string, port?: number): ServiceView[] {
    return this.services.filter(
      (s) => s.namespace === namespace && s.name === name && (port === undefined || s.port === port),
    );
  }
}
