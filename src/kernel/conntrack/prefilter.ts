// A decode-free superset pre-check of ctnetlink messages against what is ours (model/ours.ts): a message it passes
// is decoded and matched exactly, and IPv6 or anything unreadable goes to the full decoder.

import { ipv4Number } from '../../model/ip.js';
import { type AddressPort, matchTuple, type Ours, type OursLookup, type TupleFields } from '../../model/ours.js';
import { AttrCursor, NetlinkParseError } from '../netlink/codec.js';
import * as C from './constants.js';

/** A protocol number and port as one small integer. */
const protoPort = (protoNum: number, port: number): number => protoNum * 65536 + port;

/** An IPv4 address as a signed 32-bit integer, so that Sets hold it without a heap number. */
const ipKey = (address: string): number | undefined => {
  const ip = ipv4Number(address);
  return ip === undefined ? undefined : ip | 0;
};

/** The IPv4 targets of an Ours as the pre-check and kernel-filter.ts look them up. */
export interface PrefilterKeys {
  /** Protocol numbers any target uses: entries of other protocols (ICMP, GRE, ...) never match. */
  readonly protos: ReadonlySet<number>;
  readonly nodeIps: ReadonlySet<number>;
  readonly vips: ReadonlyMap<number, ReadonlySet<number>>;
  readonly endpoints: ReadonlyMap<number, ReadonlySet<number>>;
  /** Service NodePorts as protoPort. */
  readonly nodePorts: ReadonlySet<number>;
}

function addressesByPort(targets: readonly AddressPort[]): Map<number, Set<number>> {
  const out = new Map<number, Set<number>>();
  for (const t of targets) {
    const ip = ipKey(t.address);
    if (ip === undefined) continue;
    const at = protoPort(t.protoNum, t.port);
    let ips = out.get(at);
    if (!ips) {
      ips = new Set();
      out.set(at, ips);
    }
    ips.add(ip);
  }
  return out;
}

function prefilterKeys(ours: Ours): PrefilterKeys {
  const nodePorts = ours.nodePorts.filter((n) => !n.healthCheck);
  const protos = new Set([...ours.vips, ...ours.endpoints, ...nodePorts].map((t) => t.protoNum));
  const nodeIps = new Set<number>();
  for (const address of ours.nodeIps) {
    const ip = ipKey(address);
    if (ip !== undefined) nodeIps.add(ip);
  }
  return {
    protos,
    nodeIps,
    vips: addressesByPort(ours.vips),
    endpoints: addressesByPort(ours.endpoints),
    nodePorts: new Set(nodePorts.map((n) => protoPort(n.protoNum, n.port))),
  };
}

/** The ours rule's lookups over PrefilterKeys (addresses as ipKey). */
function keysLookup(keys: PrefilterKeys): OursLookup<number, true> {
  const hit = (found: boolean | undefined): true | undefined => (found ? true : undefined);
  return {
    vip: (ip, protoNum, port) => hit(keys.vips.get(protoPort(protoNum, port))?.has(ip)),
    isNodeIp: (ip) => keys.nodeIps.has(ip),
    nodePort: (protoNum, port) => hit(keys.nodePorts.has(protoPort(protoNum, port))),
    endpoint: (ip, protoNum, port) => hit(keys.endpoints.get(protoPort(protoNum, port))?.has(ip)),
  };
}

/** No address: a field the message lacks, which no key holds. */
const MISSING = 0x7fffffff + 1;

export class ConntrackPrefilter {
  private readonly keys: PrefilterKeys;
  private readonly lookup: OursLookup<number, true>;
  /** Fields of the message being scanned (reused: no allocation per message). */
  private readonly tuple: TupleFields<number> & {
    orig: { dport: number | undefined };
    reply: { sport: number | undefined };
  } = {
    orig: { protoNum: -1, dst: MISSING, dport: undefined },
    reply: { src: MISSING, sport: undefined },
  };
  /** One attribute cursor per nesting level, reset for each message: message, tuple, tuple part. */
  private readonly top = new AttrCursor();
  private readonly inTuple = new AttrCursor();
  private readonly inPart = new AttrCursor();

  constructor(ours: Ours) {
    this.keys = prefilterKeys(ours);
    this.lookup = keysLookup(this.keys);
  }

  /** The sets this test uses (kernel-filter.ts copies them into the kernel). */
  targetKeys(): PrefilterKeys {
    return this.keys;
  }

  /** False only when the message is surely IPv4 and touches none of the targets. */
  maybe(payload: Buffer): boolean {
    return this.maybeIn(payload, 0, payload.length);
  }

  /** maybe() on the payload at buf[start, end), without a Buffer view of it (no allocation). */
  maybeIn(buf: Buffer, start: number, end: number): boolean {
    if (end - start < C.NFGENMSG_LEN || buf[start] !== C.AF_INET) return true;
    const { orig, reply } = this.tuple;
    orig.protoNum = -1;
    orig.dst = reply.src = MISSING;
    orig.dport = reply.sport = undefined;
    if (!this.scan(buf, start + C.NFGENMSG_LEN, end)) return true;
    if (orig.protoNum < 0) return true;
    if (!this.keys.protos.has(orig.protoNum)) return false;
    if (orig.dport === undefined) return true;
    return matchTuple(this.lookup, this.tuple) !== undefined;
  }

  /** Walks the top-level attributes and both tuples; false on a bad length, so the decoder reports it. */
  private scan(buf: Buffer, off: number, end: number): boolean {
    try {
      const top = this.top.reset(off, end);
      while (top.next(buf)) {
        if (top.type !== C.CTA_TUPLE_ORIG && top.type !== C.CTA_TUPLE_REPLY) continue;
        const orig = top.type === C.CTA_TUPLE_ORIG;
        const tuple = this.inTuple.reset(top.vs, top.ve);
        while (tuple.next(buf)) {
          if (tuple.type === C.CTA_TUPLE_IP) this.fields(buf, tuple.vs, tuple.ve, orig ? IP_ORIG : IP_REPLY);
          else if (tuple.type === C.CTA_TUPLE_PROTO)
            this.fields(buf, tuple.vs, tuple.ve, orig ? PROTO_ORIG : PROTO_REPLY);
        }
      }
      return true;
    } catch (e) {
      if (e instanceof NetlinkParseError) return false;
      throw e;
    }
  }

  /** The fields of one CTA_TUPLE_IP or CTA_TUPLE_PROTO: only the four the check uses are read. */
  private fields(buf: Buffer, off: number, end: number, part: number): void {
    const a = this.inPart.reset(off, end);
    while (a.next(buf)) {
      const type = a.type;
      const at = a.vs;
      const size = a.ve - at;
      const { orig, reply } = this.tuple;
      if (part === IP_ORIG) {
        if (type === C.CTA_IP_V4_DST && size === 4) orig.dst = buf.readInt32BE(at);
      } else if (part === IP_REPLY) {
        if (type === C.CTA_IP_V4_SRC && size === 4) reply.src = buf.readInt32BE(at);
      } else if (part === PROTO_ORIG) {
        if (type === C.CTA_PROTO_NUM && size >= 1) orig.protoNum = buf[at]!;
        else if (type === C.CTA_PROTO_DST_PORT && size >= 2) orig.dport = buf.readUInt16BE(at);
      } else if (type === C.CTA_PROTO_SRC_PORT && size >= 2) reply.sport = buf.readUInt16BE(at);
    }
  }
}

const IP_ORIG = 0;
const IP_REPLY = 1;
const PROTO_ORIG = 2;
const PROTO_REPLY = 3;
