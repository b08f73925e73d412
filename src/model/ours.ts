// Which flows are the agent's ("ours"): one description of this node's LB-path targets and the one rule over it, from
// which the conntrack pre-check, the kernel event filter, the counters' targets and ServiceIndex.match all derive.

/** An address, port and IP protocol number (6 tcp, 17 udp, 132 sctp). */
export interface AddressPort {
  address: string;
  protoNum: number;
  port: number;
}

export interface NodePort {
  protoNum: number;
  port: number;
  /** A health-check NodePort: its probes are counted, but no Service traffic is kept by it. */
  healthCheck: boolean;
}

/** What is ours on this node. Lists in the Service index's order; repeats are allowed. */
export interface Ours {
  /** LB VIP:ports (a Service's own ingress IPs, Ingress and Gateway VIPs at their listeners); port 0 is any port. */
  vips: AddressPort[];
  /** Addresses bound on this node: its node IPs and kube-ipvs0's. */
  nodeIps: string[];
  podCidrs: string[];
  nodePorts: NodePort[];
  /** Service endpoints, seen as the reply source after DNAT. */
  endpoints: AddressPort[];
}

export const NOTHING_OURS: Ours = { vips: [], nodeIps: [], podCidrs: [], nodePorts: [], endpoints: [] };

/** The fields of a conntrack entry the rule reads; `A` is how addresses are held (text, or IPv4 as numbers). */
export interface TupleFields<A> {
  orig: { protoNum: number; dst: A; dport?: number };
  reply: { src: A; sport?: number };
}

/** Lookups of one target kind each, over whatever index the caller holds; H is what a hit gives. */
export interface OursLookup<A, H> {
  vip(address: A, protoNum: number, port: number): H | undefined;
  isNodeIp(address: A): boolean;
  /** Service NodePorts only: a health-check NodePort keeps no flow. */
  nodePort(protoNum: number, port: number): H | undefined;
  endpoint(address: A, protoNum: number, port: number): H | undefined;
}

export type TupleRule = 'vip' | 'nodePort' | 'endpoint';

/** Whether a tuple is ours and by which rule: to an LB VIP:port, to a node's NodePort, or answered by an endpoint. */
export function matchTuple<A, H>(lookup: OursLookup<A, H>, t: TupleFields<A>): { rule: TupleRule; hit: H } | undefined {
  const { protoNum, dst, dport } = t.orig;
  if (dport === undefined) return undefined;
  const vip = lookup.vip(dst, protoNum, dport);
  if (vip !== undefined) return { rule: 'vip', hit: vip };
  if (lookup.isNodeIp(dst)) {
    const nodePort = lookup.nodePort(protoNum, dport);
    if (nodePort !== undefined) return { rule: 'nodePort', hit: nodePort };
  }
  const { src, sport } = t.reply;
  if (sport === undefined) return undefined;
  const endpoint = lookup.endpoint(src, protoNum, sport);
  return endpoint === undefined ? undefined : { rule: 'endpoint', hit: endpoint };
}

const addressPortKey = (address: string, protoNum: number, port: number): string => `${address}|${protoNum}|${port}`;

/** The rule over an Ours, looked up by address text: what every other check of conntrack tuples is tested against. */
export function tupleRuleOf(ours: Ours): (t: TupleFields<string>) => TupleRule | undefined {
  const vips = new Set(ours.vips.map((v) => addressPortKey(v.address, v.protoNum, v.port)));
  const nodeIps = new Set(ours.nodeIps);
  const nodePorts = new Set(
    ours.nodePorts.filter((n) => !n.healthCheck).map((n) => addressPortKey('', n.protoNum, n.port)),
  );
  const endpoints = new Set(ours.endpoints.map((e) => addressPortKey(e.address, e.protoNum, e.port)));
  const hit = (found: boolean): true | undefined => (found ? true : undefined);
  const lookup: OursLookup<string, true> = {
    vip: (address, protoNum, port) => hit(vips.has(addressPortKey(address, protoNum, port))),
    isNodeIp: (address) => nodeIps.has(address),
    nodePort: (protoNum, port) => hit(nodePorts.has(addressPortKey('', protoNum, port))),
    endpoint: (address, protoNum, port) => hit(endpoints.has(addressPortKey(address, protoNum, port))),
  };
  return (t) => matchTuple(lookup, t)?.rule;
}
