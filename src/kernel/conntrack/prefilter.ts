// A decode-free pre-check of ctnetlink messages against the addresses and
// ports the agent keeps entries for. On a node with 1M conntrack entries of
// which a few hundred touch an LB Service, decoding every dumped entry (or
// every event at 10k/s) into objects costs seconds of CPU and tens of MB of
// garbage per dump; reading four numbers out of the attribute bytes does not.
// It is a superset test: a message it passes is decoded and matched exactly;
// IPv6 and anything it cannot read are passed through to the full decoder
// (which reports malformed input properly).
import * as C from './constants.js';
import { NLA_TYPE_MASK } from '../netlink/codec.js';
import { ipv4Number } from '../ip.js';

export interface PrefilterTargets {
  /** LB VIP:port per protocol number (6 tcp, 17 udp, 132 sctp). */
  vips: { address: string; protoNum: number; port: number }[];
  /** Addresses of this node (incl. kube-ipvs0): an entry to one of them on a NodePort is kept. */
  nodeIps: string[];
  nodePorts: { protoNum: number; port: number }[];
  /** Endpoint address:port, seen as the reply source after DNAT. */
  endpoints: { address: string; protoNum: number; port: number }[];
}

const AF_INET = 2;

/** ip (u32) and port (u16) in one exact double: ip * 65536 + port < 2^48. */
const key4 = (ip: number, port: number): number => ip * 65536 + port;

/**
 * A set of exact-integer doubles as one sorted Float64Array, searched by bisection: 8 bytes a
 * key, where a Set<number> of keys above 2^31 takes ~50 (a heap number each, and the hash table).
 * 20k endpoint keys: 0.16 MB instead of 1.2 MB; ~15 comparisons a lookup.
 */
export class KeySet {
  private readonly keys: Float64Array;
  constructor(keys: Iterable<number>) {
    this.keys = Float64Array.from(new Set(keys)).sort();
  }

  get size(): number {
    return this.keys.length;
  }

  has(k: number): boolean {
    const a = this.keys;
    let lo = 0;
    let hi = a.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const v = a[mid]!;
      if (v === k) return true;
      if (v < k) lo = mid + 1;
      else hi = mid - 1;
    }
    return false;
  }
}

/** Keys per protocol number, as KeySets. */
function byProto(items: { protoNum: number; key: number | undefined }[]): Map<number, KeySet> {
  const lists = new Map<number, number[]>();
  for (const { protoNum, key } of items) {
    if (key === undefined) continue;
    const l = lists.get(protoNum);
    if (l) l.push(key);
    else lists.set(protoNum, [key]);
  }
  return new Map([...lists].map(([p, keys]) => [p, new KeySet(keys)]));
}

const addressKey = (address: string, port: number): number | undefined => {
  const ip = ipv4Number(address);
  return ip === undefined ? undefined : key4(ip, port);
};

export class ConntrackPrefilter {
  private readonly vips: Map<number, KeySet>;
  private readonly endpoints: Map<number, KeySet>;
  private readonly nodePorts = new Map<number, Set<number>>();
  private readonly nodeIps = new Set<number>();
  /** Protocol numbers any target uses: entries of other protocols (ICMP, GRE, ...) never match. */
  private readonly protos = new Set<number>();
  /** Fields of the message being scanned (reused: no allocation per message). */
  private proto = -1;
  private origDst = -1;
  private dport = -1;
  private replySrc = -1;
  private sport = -1;

  constructor(t: PrefilterTargets) {
    const add = (m: Map<number, Set<number>>, proto: number, k: number) => {
      let s = m.get(proto);
      if (!s) m.set(proto, (s = new Set()));
      s.add(k);
    };
    this.vips = byProto(t.vips.map((v) => ({ protoNum: v.protoNum, key: addressKey(v.address, v.port) })));
    this.endpoints = byProto(t.endpoints.map((e) => ({ protoNum: e.protoNum, key: addressKey(e.address, e.port) })));
    for (const n of t.nodePorts) add(this.nodePorts, n.protoNum, n.port);
    for (const x of [...t.vips, ...t.endpoints, ...t.nodePorts]) this.protos.add(x.protoNum);
    for (const a of t.nodeIps) {
      const ip = ipv4Number(a);
      if (ip !== undefined) this.nodeIps.add(ip);
    }
  }

  /** False only when the message is surely IPv4 and touches none of the targets. */
  maybe(payload: Buffer): boolean {
    return this.maybeIn(payload, 0, payload.length);
  }

  /** maybe() on the payload at buf[start, end), without a Buffer view of it (no allocation). */
  maybeIn(buf: Buffer, start: number, end: number): boolean {
    if (end - start < C.NFGENMSG_LEN || buf[start] !== AF_INET) return true;
    this.proto = this.origDst = this.dport = this.replySrc = this.sport = -1;
    if (!this.scan(buf, start + C.NFGENMSG_LEN, end, 0)) return true;
    const p = this.proto;
    if (p < 0) return true;
    if (!this.protos.has(p)) return false;
    if (this.dport < 0) return true;
    if (this.origDst >= 0 && this.vips.get(p)?.has(key4(this.origDst, this.dport))) return true;
    if (this.nodeIps.has(this.origDst) && this.nodePorts.get(p)?.has(this.dport)) return true;
    if (this.replySrc >= 0 && this.sport >= 0 && this.endpoints.get(p)?.has(key4(this.replySrc, this.sport))) return true;
    return false;
  }

  /**
   * Walks attributes in [off, end). depth 0: top level (tuples); 1: inside a tuple (ip, proto);
   * 2: inside CTA_TUPLE_IP / CTA_TUPLE_PROTO. `where` says which tuple and which part.
   * Returns false on a length that does not fit (the decoder will say what is wrong).
   */
  private scan(b: Buffer, off: number, end: number, depth: number, where = 0): boolean {
    while (off + 4 <= end) {
      const len = b.readUInt16LE(off);
      const type = b.readUInt16LE(off + 2) & NLA_TYPE_MASK;
      if (len < 4 || off + len > end) return false;
      const body = off + 4;
      const bodyEnd = off + len;
      if (depth === 0) {
        if ((type === C.CTA_TUPLE_ORIG || type === C.CTA_TUPLE_REPLY) && !this.scan(b, body, bodyEnd, 1, type * 10)) return false;
      } else if (depth === 1) {
        if ((type === C.CTA_TUPLE_IP || type === C.CTA_TUPLE_PROTO) && !this.scan(b, body, bodyEnd, 2, where + type)) return false;
      } else {
        this.field(b, where, type, body, bodyEnd - body);
      }
      off += (len + 3) & ~3;
    }
    return true;
  }

  private field(b: Buffer, where: number, type: number, at: number, size: number): void {
    const tuple = Math.floor(where / 10);
    const part = where % 10;
    if (part === C.CTA_TUPLE_IP && size === 4) {
      if (tuple === C.CTA_TUPLE_ORIG && type === C.CTA_IP_V4_DST) this.origDst = b.readUInt32BE(at);
      if (tuple === C.CTA_TUPLE_REPLY && type === C.CTA_IP_V4_SRC) this.replySrc = b.readUInt32BE(at);
    } else if (part === C.CTA_TUPLE_PROTO && tuple === C.CTA_TUPLE_ORIG) {
      if (type === C.CTA_PROTO_NUM && size >= 1) this.proto = b[at]!;
      if (type === C.CTA_PROTO_DST_PORT && size >= 2) this.dport = b.readUInt16BE(at);
    } else if (part === C.CTA_TUPLE_PROTO && tuple === C.CTA_TUPLE_REPLY && type === C.CTA_PROTO_SRC_PORT && size >= 2) {
      this.sport = b.readUInt16BE(at);
    }
  }
}
