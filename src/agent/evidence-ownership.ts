// Which kept entries are evidence about a Service (README, "Evidence ownership"): only via facts its owner cannot
// forge against others (API allocations, LB status IP, cloud-chosen name, controller-derived endpoints).
import type { LbIngressIp, ServiceView } from '../cluster/types.js';
import type { ConntrackEntry } from '../kernel/types.js';
import { type Key, key } from '../model/address-key.js';
import { protocolOfNumber, type ServiceProtocol } from '../model/protocol.js';
import type { ServiceIndex } from './service-index.js';

/** NAMESPACE/NAME: ownership is per Service, whichever of its ports. */
const serviceRef = (s: { namespace: string; name: string }): string => `${s.namespace}/${s.name}`;

function addOwner<K>(m: Map<K, Set<string>>, k: K, owner: string): void {
  const owners = m.get(k);
  if (owners) owners.add(owner);
  else m.set(k, new Set([owner]));
}

/** Built per Service index (its cluster view and this node's addresses), on the first evidence request. */
export class EvidenceOwnership {
  /** Every Service's ClusterIPs: the API server gives each to one Service. */
  private readonly clusterIps = new Map<string, string>();
  /** NodePorts by protocol and port: the API server gives each to one Service. */
  private readonly nodePorts = new Map<Key, string>();
  /** Status LB IPs (the LB controller's, not resolved names) at protocol and Service port. */
  private readonly lbVips = new Map<Key, Set<string>>();
  /** Status LB IPs at any port. */
  private readonly lbIps = new Map<string, Set<string>>();
  /** The addresses kube-proxy serves NodePorts on, as the Service index matches them. */
  private readonly nodeIps: Set<string>;
  /** The current views of each request's Service ports (the request's may be of an older index). */
  private readonly current = new WeakMap<readonly ServiceView[], ServiceView[]>();

  constructor(private readonly index: ServiceIndex) {
    this.nodeIps = new Set([...index.local.nodeIps, ...index.local.ipvsIps]);
    for (const s of index.lb.view.services) {
      const owner = serviceRef(s);
      for (const ip of s.clusterIPs) this.clusterIps.set(ip, owner);
      if (s.nodePort) this.nodePorts.set(key('', s.protocol, s.nodePort), owner);
      for (const ing of s.lbIngress) {
        if (ing.resolvedFrom !== undefined) continue;
        addOwner(this.lbVips, key(ing.ip, s.protocol, s.port), owner);
        addOwner(this.lbIps, ing.ip, owner);
      }
    }
  }

  /** Whether `e` is evidence about the Service whose ports (one Service's, as find() returns them) are `svcs`. */
  owns(entry: ConntrackEntry, svcs: readonly ServiceView[]): boolean {
    const first = svcs[0];
    const proto = protocolOfNumber(entry.orig.protoNum);
    if (first === undefined || proto === undefined || entry.orig.dport === undefined) return false;
    const owner = serviceRef(first);
    if (this.isOthersDestination(entry.orig.dst, proto, entry.orig.dport, owner)) return false;
    return this.currentViews(svcs).some((s) => s.protocol === proto && this.hasOwnLeg(entry, s));
  }

  /** The destination is another Service's: its ClusterIP, its NodePort here, or a status LB VIP:port it holds. */
  private isOthersDestination(dst: string, proto: ServiceProtocol, dport: number, owner: string): boolean {
    const clusterIpOwner = this.clusterIps.get(dst);
    if (clusterIpOwner !== undefined && clusterIpOwner !== owner) return true;
    const nodePortOwner = this.nodeIps.has(dst) ? this.nodePorts.get(key('', proto, dport)) : undefined;
    if (nodePortOwner !== undefined && nodePortOwner !== owner) return true;
    const vipOwners = this.lbVips.get(key(dst, proto, dport));
    return vipOwners !== undefined && (vipOwners.size > 1 || !vipOwners.has(owner));
  }

  /** A leg of the flow only this Service port has (never an Ingress or Gateway VIP: one fronts many routes). */
  private hasOwnLeg(entry: ConntrackEntry, service: ServiceView): boolean {
    const { dst, dport } = entry.orig;
    if (dport === service.port && service.clusterIPs.includes(dst)) return true;
    if (dport === service.nodePort && this.nodeIps.has(dst)) return true;
    if (dport === service.port && service.lbIngress.some((ing) => ing.ip === dst && this.isOwnLbAddress(ing, service)))
      return true;
    return this.isManagedEndpoint(entry, service);
  }

  /** A status IP is the LB controller's word; a resolved name only when the cloud chose it and no one else owns it. */
  private isOwnLbAddress(ing: LbIngressIp, s: ServiceView): boolean {
    if (ing.resolvedFrom === undefined) return true;
    if (s.chosenLbHostnames?.includes(ing.resolvedFrom)) return false;
    return !this.clusterIps.has(ing.ip) && !this.lbIps.has(ing.ip) && !this.index.isLocal(ing.ip);
  }

  /** The reply comes from one of the port's endpoints, all derived by the endpointslice controller. */
  private isManagedEndpoint(e: ConntrackEntry, s: ServiceView): boolean {
    if (s.unmanagedEndpoints) return false;
    return this.index.lb.endpointServices(e.reply.src, s.protocol, e.reply.sport)?.includes(s) ?? false;
  }

  /** The Service ports of this index with the names and ports of `svcs` (matched by name, as belongsTo does). */
  private currentViews(svcs: readonly ServiceView[]): ServiceView[] {
    let views = this.current.get(svcs);
    if (!views) {
      const first = svcs[0]!;
      views = this.index
        .find(first.namespace, first.name)
        .filter((v) => svcs.some((s) => s.port === v.port && s.protocol === v.protocol));
      this.current.set(svcs, views);
    }
    return views;
  }
}

const byIndex = new WeakMap<ServiceIndex, EvidenceOwnership>();

/** The ownership rules over one Service index, built once per index. */
export function evidenceOwnership(index: ServiceIndex): EvidenceOwnership {
  let o = byIndex.get(index);
  if (!o) {
    o = new EvidenceOwnership(index);
    byIndex.set(index, o);
  }
  return o;
}
