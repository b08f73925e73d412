// The LB Services of a view and their address lookups, built once and read by the agent's index and the detectors;
// where the two differ on purpose, both answers are kept under their own names.
import type { ConntrackEntry } from '../kernel/types.js';
import { AddressPortMap, addTo, type Key, key, listOf, type OneOrMore } from '../model/address-key.js';
import { protocolOfNumber } from '../model/protocol.js';
import { slicePort } from './endpoints.js';
import { pushTo } from './objects.js';
import type { ClusterView, L7Listener, L7Vip, ServiceView } from './types.js';

type Svcs = OneOrMore<ServiceView>;

/** Ingress LBs listen on HTTP and HTTPS whatever the backend Service port is. */
const INGRESS_LISTENERS: readonly L7Listener[] = [80, 443].map((port) => ({ protocol: 'TCP', port }));

/** Where an L7 VIP listens: a Gateway at its routes' listeners, an Ingress at 80/443 TCP. */
export function l7Listeners(iv: L7Vip): readonly L7Listener[] {
  return iv.gateway?.listeners ?? INGRESS_LISTENERS;
}

/** The Service port has an address traffic can be matched against: an LB ingress IP, or an Ingress VIP to it. */
function hasLbAddress(service: ServiceView): boolean {
  return service.lbIngress.length > 0 || service.ingressVips.length > 0;
}

/** The agent's endpoint port: slice port, else numeric targetPort, else Service port, since conntrack needs one. */
export function endpointPort(service: ServiceView, ep: ServiceView['endpoints'][number]): number {
  return knownTargetPort(service, ep) ?? service.port;
}

/** The endpoint port the cluster states, or undefined, so the detectors never make a finding from a guessed port. */
export function knownTargetPort(service: ServiceView, ep: ServiceView['endpoints'][number]): number | undefined {
  return slicePort(service, ep) ?? (typeof service.targetPort === 'number' ? service.targetPort : undefined);
}

/** The elements of `list` that pass: `list` itself when all do (nothing modifies these lists). */
function kept<T>(list: T[], keep: (x: T) => boolean): T[] {
  return list.every(keep) ? list : list.filter(keep);
}

/** The only one-or-more values that are the agent's: Service ports with an LB address. */
function addressedOf(services: Svcs | undefined): ServiceView[] | undefined {
  if (services === undefined) return undefined;
  const some = kept(Array.isArray(services) ? services : [services], hasLbAddress);
  return some.length > 0 ? some : undefined;
}

const includes = <V extends object>(v: OneOrMore<V> | undefined, x: V): boolean =>
  Array.isArray(v) ? v.includes(x) : v === x;

export class LbServiceIndex {
  /** Service ports loopback concerns: LB ingress IP, Ingress VIP, or LB/Gateway hostname (maybe unresolved). */
  readonly services: ServiceView[];
  /** Of `services`, those with an address: the only ones the agent can match packets against. */
  readonly addressed: ServiceView[];
  /** Own LB ingress IP + protocol + Service port. */
  private readonly byLbVip = new AddressPortMap<ServiceView>();
  /** Own LB ingress IP, any port. */
  private readonly byLbIp = new Map<string, Svcs>();
  /** Ingress or Gateway VIP, any port (cluster IPs are canonical text, so text keys match as the address keys do). */
  private readonly byIngressVip = new Map<string, Svcs>();
  /** Ingress or Gateway VIP at each port it listens on (l7Listeners). */
  private readonly byL7VipPort = new AddressPortMap<ServiceView>();
  /** NodePort (any address) over `services`. */
  private readonly byNodePort = new Map<Key, Svcs>();
  /** Every endpoint of the `addressed` ports, at endpointPort(). */
  private readonly byEndpoint = new AddressPortMap<ServiceView>();
  /** This node's endpoints of `services`, at knownTargetPort(). */
  private readonly byLocalEndpoint = new AddressPortMap<ServiceView>();
  /** Keys where an LB VIP:port is also an Ingress VIP at 80/443, in view order as one map would hold them. */
  private readonly vipOverlap = new Map<Key, ServiceView[]>();

  constructor(readonly view: ClusterView) {
    this.services = kept(
      view.services,
      (s) => hasLbAddress(s) || s.lbHostnames !== undefined || s.gatewayHostnames !== undefined,
    );
    this.addressed = kept(this.services, hasLbAddress);
    for (const s of this.services) {
      for (const { ip } of s.lbIngress) {
        this.byLbVip.add(ip, s.protocol, s.port, s);
        addTo(this.byLbIp, ip, s);
      }
      for (const iv of s.ingressVips) this.addL7Vip(iv, s);
      if (s.nodePort) addTo(this.byNodePort, key('', s.protocol, s.nodePort), s);
      const addressed = hasLbAddress(s);
      for (const ep of s.endpoints) {
        if (addressed) this.byEndpoint.add(ep.address, s.protocol, endpointPort(s, ep), s);
        if (ep.local) this.byLocalEndpoint.add(ep.address, s.protocol, knownTargetPort(s, ep), s);
      }
    }
    this.indexOverlaps();
  }

  /** Each Service port once per address and per address and listener, however many Ingresses or Gateways give it. */
  private addL7Vip(iv: L7Vip, service: ServiceView): void {
    if (!includes(this.byIngressVip.get(iv.ip), service)) addTo(this.byIngressVip, iv.ip, service);
    for (const l of l7Listeners(iv)) {
      if (!includes(this.byL7VipPort.get(iv.ip, l.protocol, l.port), service))
        this.byL7VipPort.add(iv.ip, l.protocol, l.port, service);
    }
  }

  private indexOverlaps(): void {
    const keys = new Set<Key>();
    for (const s of this.addressed) {
      for (const iv of s.ingressVips) {
        for (const l of l7Listeners(iv))
          if (this.byLbVip.has(iv.ip, l.protocol, l.port)) keys.add(key(iv.ip, l.protocol, l.port));
      }
    }
    if (keys.size === 0) return;
    const add = (k: Key, s: ServiceView) => {
      if (keys.has(k)) pushTo(this.vipOverlap, k, s);
    };
    for (const s of this.addressed) {
      for (const ing of s.lbIngress) add(key(ing.ip, s.protocol, s.port), s);
      for (const iv of s.ingressVips) for (const l of l7Listeners(iv)) add(key(iv.ip, l.protocol, l.port), s);
    }
  }

  /** The Service ports with this own LB ingress IP:port (the detectors' L4 LB VIP). */
  lbVipServices(ip: string, proto: string, port: number | undefined): ServiceView[] | undefined {
    return listOf(this.byLbVip.get(ip, proto, port));
  }

  /** Service ports the agent counts for this VIP:port: own LB IP, Ingress (80/443 TCP) and Gateway listener VIPs. */
  vipServices(ip: string, proto: string, port: number | undefined): ServiceView[] | undefined {
    const own = this.byLbVip.get(ip, proto, port);
    const ingress = this.byL7VipPort.get(ip, proto, port);
    if (ingress === undefined) return listOf(own);
    if (own === undefined) return listOf(ingress);
    return this.vipOverlap.get(key(ip, proto, port));
  }

  /** The Service ports with this own LB ingress IP, any port: health checks come from the VIP itself. */
  lbIpServices(ip: string): ServiceView[] | undefined {
    return listOf(this.byLbIp.get(ip));
  }

  /** The Service ports behind this Ingress or Gateway VIP at any port (the L7 loop is matched by source). */
  ingressVipServices(ip: string): ServiceView[] | undefined {
    return listOf(this.byIngressVip.get(ip));
  }

  /** The Service ports with an LB address that have this NodePort (the agent's). */
  nodePortServices(proto: string, port: number | undefined): ServiceView[] | undefined {
    return addressedOf(this.byNodePort.get(key('', proto, port)));
  }

  /** The Service port with this NodePort; NodePorts are cluster-unique, and on a clash the later one wins. */
  nodePortService(proto: string, port: number | undefined): ServiceView | undefined {
    const v = this.byNodePort.get(key('', proto, port));
    return Array.isArray(v) ? v[v.length - 1] : v;
  }

  /** The `addressed` Service ports with an endpoint at ip:port on any node: where a DNAT-ed reply comes from. */
  endpointServices(ip: string, proto: string, port: number | undefined): ServiceView[] | undefined {
    return listOf(this.byEndpoint.get(ip, proto, port));
  }

  /** The Service ports with an endpoint on this node at ip:port (knownTargetPort): the direct-pod return leg. */
  localEndpointServices(ip: string, proto: string, port: number | undefined): ServiceView[] | undefined {
    return listOf(this.byLocalEndpoint.get(ip, proto, port));
  }

  /**
   * What a conntrack entry from a source of this node is the return leg of, when the LB sent a loop back: the
   * NodePort's Service port on a node address, or a local endpoint's that a pod reached unchanged (not DNATed here).
   */
  returnLeg(e: ConntrackEntry, nodeIps: { has(ip: string): boolean }, isPodIp: (ip: string) => boolean) {
    const { orig } = e;
    const proto = protocolOfNumber(orig.protoNum);
    if (!proto || orig.dport === undefined) return {};
    const nodePort = nodeIps.has(orig.dst) ? this.nodePortService(proto, orig.dport) : undefined;
    const direct = isPodIp(orig.src) && e.reply.src === orig.dst;
    const endpoints = direct ? this.localEndpointServices(orig.dst, proto, orig.dport) : undefined;
    return { ...(nodePort ? { nodePort } : {}), ...(endpoints ? { endpoints } : {}) };
  }
}

/** A loop's two legs are of one Service (its views may be distinct objects): flows to two Services are no loop. */
export const shareAService = (a: readonly ServiceView[], b: readonly ServiceView[]): boolean =>
  a.some((s) => b.some((t) => t.namespace === s.namespace && t.name === s.name));
