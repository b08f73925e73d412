// A decode-free pre-check of ctnetlink messages against the addresses and
// ports the agent keeps entries for. On a node with 1M conntrack entries of
// which a few hundred touch an LB Service, decoding every dumped entry (or
// every event at 10k/s) into objects costs seconds of CPU and tens of MB of
// garbage per dump; reading four numbers out of the attribute bytes does not.
// It is a superset test: a message it passes is decoded and matched exactly;
// IPv6 and anything it cannot read are passed through to the full decoder
// (which reports malformed input properly).

import { ipv4Number } from '../ip.js';
import { AttrCursor, NetlinkParseError } from '../netlink/codec.js';
import * as C from './constants.js';

export interface PrefilterTargets {
  /** LB VIP:port per protocol number (6 tcp, 17 udp, 132 sctp). */
  vips: { address: string; protoNum: number; port: number }[];
  /** Addresses of this node (incl. kube-ipvs0): an entry to one of them on a NodePort is kept. */
  nodeIps: string[];
  nodePorts: { protoNum: number; port: number }[];
  /** Endpoint address:port, seen as the reply source after DNAT. */
  endpoints: { address: string; protoNum: number; port: number }[];
}

/** What the cursors point at between messages. */
const NO_BYTES = Buffer.alloc(0);

/** ip (u32) and port (u16) in one exact double: ip * 65536 + port < 2^48. */
const key4 = (ip: number, port: number): number => ip * 65536 + port;

/**
 * A set of exact-integer doubles as one sorted Float64Array, searched by bisection: 8 bytes a
 * key, where a Set<number> of keys above 2^31 takes ~50 (a heap number each, and the hash table).
 * 20k endpoint keys: 0.16 MB instead of 1.2 MB; ~15 comparisons a lookup.
 */
export class KeySet {
  private readonly keys: Float64Array;
  constructor(keys: Iterable<number> | Float64Array) {
    this.keys = sortedUnique(keys instanceof Float64Array ? keys.slice() : Float64Array.from(keys));
  }

  get size(): number {
    return this.keys.length;
  }

  /** The keys, ascending (the set's own array: do not write to it). */
  get sorted(): Float64Array {
    return this.keys;
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

/** The array sorted, without repeats: in place, or a shorter copy when there were repeats. */
function sortedUnique(a: Float64Array): Float64Array {
  a.sort();
  let n = 0;
  for (let i = 0; i < a.length; i++) if (n === 0 || a[i] !== a[n - 1]) a[n++] = a[i]!;
  return n === a.length ? a : a.slice(0, n);
}

/**
 * The keys of a target list per protocol number, as KeySets: counted, then written into one
 * Float64Array per protocol. A (protocol, key) object per target, a list per protocol and a Set to
 * drop repeats allocated 13.7 MB at 5,000 Services (26k endpoint and 6,667 VIP targets; a 1.4 MB
 * Float64Array here), on every Service index build (bench/cluster-heap.ts).
 */
function byProto<T extends { protoNum: number }>(
  items: readonly T[],
  keyOf: (x: T) => number | undefined,
): Map<number, KeySet> {
  const counts = new Map<number, number>();
  for (let i = 0; i < items.length; i++) {
    const p = items[i]!.protoNum;
    counts.set(p, (counts.get(p) ?? 0) + 1);
  }
  const filled = new Map<number, { keys: Float64Array; n: number }>();
  for (const [p, c] of counts) filled.set(p, { keys: new Float64Array(c), n: 0 });
  for (let i = 0; i < items.length; i++) {
    const x = items[i]!;
    const k = keyOf(x);
    if (k === undefined) continue;
    const f = filled.get(x.protoNum)!;
    f.keys[f.n++] = k;
  }
  const out = new Map<number, KeySet>();
  for (const [p, f] of filled) if (f.n > 0) out.set(p, new KeySet(f.keys.subarray(0, f.n)));
  return out;
}

/**
 * The target sets of a ConntrackPrefilter, for the kernel-side copy of its test
 * (kernel-filter.ts). Per protocol number: endpoint and VIP keys are ip * 65536 + port,
 * NodePort keys are ports.
 */
export interface PrefilterKeys {
  readonly protos: ReadonlySet<number>;
  readonly nodeIps: ReadonlySet<number>;
  readonly vips: ReadonlyMap<number, KeySet>;
  readonly endpoints: ReadonlyMap<number, KeySet>;
  readonly nodePorts: ReadonlyMap<number, KeySet>;
}

const addressKey = (address: string, port: number): number | undefined => {
  const ip = ipv4Number(address);
  return ip === undefined ? undefined : key4(ip, port);
};

export class ConntrackPrefilter {
  private readonly vips: Map<number, KeySet>;
  private readonly endpoints: Map<number, KeySet>;
  private readonly nodePorts: Map<number, KeySet>;
  private readonly nodeIps = new Set<number>();
  /** Protocol numbers any target uses: entries of other protocols (ICMP, GRE, ...) never match. */
  private readonly protos = new Set<number>();
  /** Fields of the message being scanned (reused: no allocation per message). */
  private proto = -1;
  private origDst = -1;
  private dport = -1;
  private replySrc = -1;
  private sport = -1;
  /** One attribute cursor per nesting level, reset for each message: message, tuple, tuple part. */
  private readonly top = new AttrCursor(NO_BYTES, 0, 0);
  private readonly inTuple = new AttrCursor(NO_BYTES, 0, 0);
  private readonly inPart = new AttrCursor(NO_BYTES, 0, 0);

  constructor(t: PrefilterTargets) {
    this.vips = byProto(t.vips, (v) => addressKey(v.address, v.port));
    this.endpoints = byProto(t.endpoints, (e) => addressKey(e.address, e.port));
    this.nodePorts = byProto(t.nodePorts, (n) => n.port);
    for (const list of [t.vips, t.endpoints, t.nodePorts])
      for (let i = 0; i < list.length; i++) this.protos.add(list[i]!.protoNum);
    for (const a of t.nodeIps) {
      const ip = ipv4Number(a);
      if (ip !== undefined) this.nodeIps.add(ip);
    }
  }

  /** The sets this test uses (kernel-filter.ts copies them into the kernel). */
  targetKeys(): PrefilterKeys {
    return {
      protos: this.protos,
      nodeIps: this.nodeIps,
      vips: this.vips,
      endpoints: this.endpoints,
      nodePorts: this.nodePorts,
    };
  }

  /** False only when the message is surely IPv4 and touches none of the targets. */
  maybe(payload: Buffer): boolean {
    return this.maybeIn(payload, 0, payload.length);
  }

  /** maybe() on the payload at buf[start, end), without a Buffer view of it (no allocation). */
  maybeIn(buf: Buffer, start: number, end: number): boolean {
    if (end - start < C.NFGENMSG_LEN || buf[start] !== C.AF_INET) return true;
    this.proto = this.origDst = this.dport = this.replySrc = this.sport = -1;
    if (!this.scan(buf, start + C.NFGENMSG_LEN, end)) return true;
    const p = this.proto;
    if (p < 0) return true;
    if (!this.protos.has(p)) return false;
    if (this.dport < 0) return true;
    if (this.origDst >= 0 && this.vips.get(p)?.has(key4(this.origDst, this.dport))) return true;
    if (this.nodeIps.has(this.origDst) && this.nodePorts.get(p)?.has(this.dport)) return true;
    if (this.replySrc >= 0 && this.sport >= 0 && this.endpoints.get(p)?.has(key4(this.replySrc, this.sport)))
      return true;
    return false;
  }

  /**
   * Walks the top-level attributes in [off, end) and the two tuples in them, with one reused
   * attribute cursor per nesting level (no allocation per message). Returns false on a length that
   * does not fit: the message is passed on, and the decoder will say what is wrong.
   */
  private scan(b: Buffer, off: number, end: number): boolean {
    try {
      const top = this.top.reset(b, off, end);
      while (top.next()) {
        if (top.type !== C.CTA_TUPLE_ORIG && top.type !== C.CTA_TUPLE_REPLY) continue;
        const orig = top.type === C.CTA_TUPLE_ORIG;
        const tuple = this.inTuple.reset(b, top.vs, top.ve);
        while (tuple.next()) {
          if (tuple.type === C.CTA_TUPLE_IP) this.fields(b, tuple.vs, tuple.ve, orig ? IP_ORIG : IP_REPLY);
          else if (tuple.type === C.CTA_TUPLE_PROTO)
            this.fields(b, tuple.vs, tuple.ve, orig ? PROTO_ORIG : PROTO_REPLY);
        }
      }
      return true;
    } catch (e) {
      if (e instanceof NetlinkParseError) return false;
      throw e;
    } finally {
      // The cursors must not keep the receive buffer: after a dump it is the 1 MiB batch buffer,
      // which a cursor would hold for as long as the agent runs.
      this.top.reset(NO_BYTES, 0, 0);
      this.inTuple.reset(NO_BYTES, 0, 0);
      this.inPart.reset(NO_BYTES, 0, 0);
    }
  }

  /** The fields of one CTA_TUPLE_IP or CTA_TUPLE_PROTO: only the four the check uses are read. */
  private fields(b: Buffer, off: number, end: number, part: number): void {
    const a = this.inPart.reset(b, off, end);
    while (a.next()) {
      const type = a.type;
      const at = a.vs;
      const size = a.ve - at;
      if (part === IP_ORIG) {
        if (type === C.CTA_IP_V4_DST && size === 4) this.origDst = u32be(b, at);
      } else if (part === IP_REPLY) {
        if (type === C.CTA_IP_V4_SRC && size === 4) this.replySrc = u32be(b, at);
      } else if (part === PROTO_ORIG) {
        if (type === C.CTA_PROTO_NUM && size >= 1) this.proto = b[at]!;
        else if (type === C.CTA_PROTO_DST_PORT && size >= 2) this.dport = (b[at]! << 8) | b[at + 1]!;
      } else if (type === C.CTA_PROTO_SRC_PORT && size >= 2) this.sport = (b[at]! << 8) | b[at + 1]!;
    }
  }
}

const IP_ORIG = 0;
const IP_REPLY = 1;
const PROTO_ORIG = 2;
const PROTO_REPLY = 3;

const u32be = (b: Buffer, o: number): number =>
  ((b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!) >>> 0;
