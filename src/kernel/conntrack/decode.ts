// Decodes ctnetlink messages (big-endian integers) in place: CtView reads one message into reused numeric fields,
// so a dump that counts or keeps few entries allocates nothing for the rest; toEntry() builds a kept entry.
import { formatIPv4, formatIPv6 } from '../ip.js';
import { type NetlinkMessage, NetlinkParseError, NLM_F_CREATE, NLM_F_EXCL } from '../netlink/codec.js';
import type { ConntrackCounters, ConntrackEntry, ConntrackEventType, ConntrackTuple } from '../types.js';
import * as C from './constants.js';

const be16 = (buf: Buffer, o: number): number => (buf[o]! << 8) | buf[o + 1]!;
const be32 = (buf: Buffer, o: number): number =>
  ((buf[o]! << 24) | (buf[o + 1]! << 16) | (buf[o + 2]! << 8) | buf[o + 3]!) >>> 0;

function readBe64(buf: Buffer, off: number): number {
  // Counters fit in 2^53 for any realistic uptime; exactness beyond is not needed.
  return be32(buf, off) * 0x100000000 + be32(buf, off + 4);
}

/** -1 marks a field the message did not carry. */
export const NONE = -1;

/** One tuple's fields, as offsets and numbers into the message being decoded. */
export class CtTupleView {
  /** Offset of the source address in the buffer, and its length (4 or 16); NONE when absent. */
  srcOff = NONE;
  srcLen = 0;
  dstOff = NONE;
  dstLen = 0;
  protoNum = 0;
  sport = NONE;
  dport = NONE;
  icmpId = NONE;
  icmpType = NONE;
  icmpCode = NONE;

  clear(): void {
    this.srcOff = this.dstOff = NONE;
    this.srcLen = this.dstLen = 0;
    this.protoNum = 0;
    this.sport = this.dport = this.icmpId = this.icmpType = this.icmpCode = NONE;
  }

  /** The reverse of t (src <-> dst, sport <-> dport), for a DESTROY without a reply tuple. */
  mirrorOf(tuple: CtTupleView): void {
    this.srcOff = tuple.dstOff;
    this.srcLen = tuple.dstLen;
    this.dstOff = tuple.srcOff;
    this.dstLen = tuple.srcLen;
    this.protoNum = tuple.protoNum;
    this.sport = tuple.dport;
    this.dport = tuple.sport;
    this.icmpId = tuple.icmpId;
    this.icmpType = tuple.icmpType;
    this.icmpCode = tuple.icmpCode;
  }

  toTuple(buf: Buffer): ConntrackTuple {
    // The ports in the literal (undefined until read): a TCP/UDP tuple keeps all its fields inside the object.
    const t: ConntrackTuple = {
      src: formatAddr(buf, this.srcOff, this.srcLen),
      dst: formatAddr(buf, this.dstOff, this.dstLen),
      protoNum: this.protoNum,
      sport: this.sport === NONE ? undefined : this.sport,
      dport: this.dport === NONE ? undefined : this.dport,
    };
    if (this.icmpId !== NONE) t.icmpId = this.icmpId;
    if (this.icmpType !== NONE) t.icmpType = this.icmpType;
    if (this.icmpCode !== NONE) t.icmpCode = this.icmpCode;
    return t;
  }
}

export const formatAddr = (buf: Buffer, off: number, len: number): string =>
  len === 4 ? formatIPv4(buf, off) : formatIPv6(buf, off);

function overrun(type: number, len: number, at: number): NetlinkParseError {
  return new NetlinkParseError(`conntrack attribute type ${type} length ${len} overruns its container`, at);
}

function short(what: string, have: number, need: number, at: number): NetlinkParseError {
  return new NetlinkParseError(`${what}: ${have} bytes, need ${need}`, at);
}

/** One ctnetlink entry message decoded in place; fields stay valid until the receive buffer is reused. */
export class CtView {
  buf: Buffer = Buffer.alloc(0);
  /** The message's payload (nfgenmsg + attributes) is buf[start, end); error offsets are relative to start. */
  start = 0;
  end = 0;
  family: 4 | 6 = 4;
  readonly orig = new CtTupleView();
  readonly reply = new CtTupleView();
  hasOrig = false;
  hasReply = false;
  status = 0;
  timeoutS = 0;
  mark = 0;
  zone = 0;
  id = 0;
  /** CTA_PROTOINFO_TCP_STATE, NONE when absent. */
  tcpState = NONE;
  use = NONE;
  origPackets = NONE;
  origBytes = NONE;
  replyPackets = NONE;
  replyBytes = NONE;
  hasOrigCounters = false;
  hasReplyCounters = false;
  /** Offset of CTA_TIMESTAMP_START's 8 bytes, NONE when absent. */
  startOff = NONE;

  /** Decodes buf[start, end) (an IPCTNL_MSG_CT_NEW/DELETE payload); throws NetlinkParseError. */
  decode(b: Buffer, start: number, end: number): this {
    this.buf = b;
    this.start = start;
    this.end = end;
    if (end - start < C.NFGENMSG_LEN) throw new NetlinkParseError(`nfgenmsg: ${end - start} bytes, need 4`, 0);
    const fam = b[start];
    if (fam !== C.AF_INET && fam !== C.AF_INET6) throw new NetlinkParseError(`conntrack family ${fam}`, 0);
    this.family = fam === C.AF_INET ? 4 : 6;
    this.hasOrig = this.hasReply = this.hasOrigCounters = this.hasReplyCounters = false;
    this.status = this.timeoutS = this.mark = this.zone = this.id = 0;
    this.tcpState = this.use = this.startOff = NONE;
    this.origPackets = this.origBytes = this.replyPackets = this.replyBytes = NONE;
    let o = start + C.NFGENMSG_LEN;
    while (o + 4 <= end) {
      const len = b[o]! | (b[o + 1]! << 8);
      const type = (b[o + 2]! | (b[o + 3]! << 8)) & 0x3fff;
      if (len < 4 || o + len > end) throw overrun(type, len, o - start);
      const vs = o + 4;
      const ve = o + len;
      const have = len - 4;
      switch (type) {
        case C.CTA_TUPLE_ORIG:
          this.tuple(this.orig, vs, ve);
          this.hasOrig = true;
          break;
        case C.CTA_TUPLE_REPLY:
          this.tuple(this.reply, vs, ve);
          this.hasReply = true;
          break;
        case C.CTA_STATUS:
          if (have < 4) throw short('CTA_STATUS', have, 4, vs - start);
          this.status = be32(b, vs);
          break;
        case C.CTA_TIMEOUT:
          if (have < 4) throw short('CTA_TIMEOUT', have, 4, vs - start);
          this.timeoutS = be32(b, vs);
          break;
        case C.CTA_MARK:
          if (have < 4) throw short('CTA_MARK', have, 4, vs - start);
          this.mark = be32(b, vs);
          break;
        case C.CTA_ZONE:
          if (have < 2) throw short('CTA_ZONE', have, 2, vs - start);
          this.zone = be16(b, vs);
          break;
        case C.CTA_ID:
          if (have < 4) throw short('CTA_ID', have, 4, vs - start);
          this.id = be32(b, vs);
          break;
        case C.CTA_USE:
          if (have < 4) throw short('CTA_USE', have, 4, vs - start);
          this.use = be32(b, vs);
          break;
        case C.CTA_COUNTERS_ORIG:
          this.counters(vs, ve, false);
          break;
        case C.CTA_COUNTERS_REPLY:
          this.counters(vs, ve, true);
          break;
        case C.CTA_TIMESTAMP:
          this.timestamp(vs, ve);
          break;
        case C.CTA_PROTOINFO:
          this.protoinfo(vs, ve);
          break;
      }
      o += (len + 3) & ~3;
    }
    if (!this.hasOrig) throw new NetlinkParseError('conntrack entry without CTA_TUPLE_ORIG', C.NFGENMSG_LEN);
    // DESTROY events may omit the reply tuple on some kernels; mirror the original then.
    if (!this.hasReply) this.reply.mirrorOf(this.orig);
    return this;
  }

  private tuple(t: CtTupleView, start: number, end: number): void {
    const b = this.buf;
    const base = this.start;
    t.clear();
    let o = start;
    while (o + 4 <= end) {
      const len = b[o]! | (b[o + 1]! << 8);
      const type = (b[o + 2]! | (b[o + 3]! << 8)) & 0x3fff;
      if (len < 4 || o + len > end) throw overrun(type, len, o - base);
      if (type === C.CTA_TUPLE_IP) this.tupleIp(t, o + 4, o + len);
      else if (type === C.CTA_TUPLE_PROTO) this.tupleProto(t, o + 4, o + len);
      o += (len + 3) & ~3;
    }
    if (t.srcOff === NONE || t.dstOff === NONE)
      throw new NetlinkParseError('conntrack tuple without addresses', start - base);
  }

  private tupleIp(tuple: CtTupleView, start: number, end: number): void {
    const b = this.buf;
    const base = this.start;
    let o = start;
    while (o + 4 <= end) {
      const len = b[o]! | (b[o + 1]! << 8);
      const type = (b[o + 2]! | (b[o + 3]! << 8)) & 0x3fff;
      if (len < 4 || o + len > end) throw overrun(type, len, o - base);
      const vs = o + 4;
      const have = len - 4;
      switch (type) {
        case C.CTA_IP_V4_SRC:
          if (have < 4) throw short('CTA_IP_V4_SRC', have, 4, vs - base);
          tuple.srcOff = vs;
          tuple.srcLen = 4;
          break;
        case C.CTA_IP_V4_DST:
          if (have < 4) throw short('CTA_IP_V4_DST', have, 4, vs - base);
          tuple.dstOff = vs;
          tuple.dstLen = 4;
          break;
        case C.CTA_IP_V6_SRC:
          if (have < 16) throw short('CTA_IP_V6_SRC', have, 16, vs - base);
          tuple.srcOff = vs;
          tuple.srcLen = 16;
          break;
        case C.CTA_IP_V6_DST:
          if (have < 16) throw short('CTA_IP_V6_DST', have, 16, vs - base);
          tuple.dstOff = vs;
          tuple.dstLen = 16;
          break;
      }
      o += (len + 3) & ~3;
    }
  }

  private tupleProto(tuple: CtTupleView, start: number, end: number): void {
    const b = this.buf;
    const base = this.start;
    let o = start;
    while (o + 4 <= end) {
      const len = b[o]! | (b[o + 1]! << 8);
      const type = (b[o + 2]! | (b[o + 3]! << 8)) & 0x3fff;
      if (len < 4 || o + len > end) throw overrun(type, len, o - base);
      const vs = o + 4;
      const have = len - 4;
      switch (type) {
        case C.CTA_PROTO_NUM:
          if (have < 1) throw short('CTA_PROTO_NUM', have, 1, vs - base);
          tuple.protoNum = b[vs]!;
          break;
        case C.CTA_PROTO_SRC_PORT:
          if (have < 2) throw short('CTA_PROTO_SRC_PORT', have, 2, vs - base);
          tuple.sport = be16(b, vs);
          break;
        case C.CTA_PROTO_DST_PORT:
          if (have < 2) throw short('CTA_PROTO_DST_PORT', have, 2, vs - base);
          tuple.dport = be16(b, vs);
          break;
        case C.CTA_PROTO_ICMP_ID:
        case C.CTA_PROTO_ICMPV6_ID:
          if (have < 2) throw short('CTA_PROTO_ICMP_ID', have, 2, vs - base);
          tuple.icmpId = be16(b, vs);
          break;
        case C.CTA_PROTO_ICMP_TYPE:
        case C.CTA_PROTO_ICMPV6_TYPE:
          if (have < 1) throw short('CTA_PROTO_ICMP_TYPE', have, 1, vs - base);
          tuple.icmpType = b[vs]!;
          break;
        case C.CTA_PROTO_ICMP_CODE:
        case C.CTA_PROTO_ICMPV6_CODE:
          if (have < 1) throw short('CTA_PROTO_ICMP_CODE', have, 1, vs - base);
          tuple.icmpCode = b[vs]!;
          break;
      }
      o += (len + 3) & ~3;
    }
  }

  private counters(start: number, end: number, reply: boolean): void {
    const b = this.buf;
    const base = this.start;
    let packets = 0;
    let bytes = 0;
    let o = start;
    while (o + 4 <= end) {
      const len = b[o]! | (b[o + 1]! << 8);
      const type = (b[o + 2]! | (b[o + 3]! << 8)) & 0x3fff;
      if (len < 4 || o + len > end) throw overrun(type, len, o - base);
      const vs = o + 4;
      const have = len - 4;
      if (type === C.CTA_COUNTERS_PACKETS) {
        if (have < 8) throw short('CTA_COUNTERS_PACKETS', have, 8, vs - base);
        packets = readBe64(b, vs);
      } else if (type === C.CTA_COUNTERS_BYTES) {
        if (have < 8) throw short('CTA_COUNTERS_BYTES', have, 8, vs - base);
        bytes = readBe64(b, vs);
      } else if (type === C.CTA_COUNTERS32_PACKETS) {
        if (have < 4) throw short('CTA_COUNTERS32_PACKETS', have, 4, vs - base);
        packets = be32(b, vs);
      } else if (type === C.CTA_COUNTERS32_BYTES) {
        if (have < 4) throw short('CTA_COUNTERS32_BYTES', have, 4, vs - base);
        bytes = be32(b, vs);
      }
      o += (len + 3) & ~3;
    }
    if (reply) {
      this.replyPackets = packets;
      this.replyBytes = bytes;
      this.hasReplyCounters = true;
    } else {
      this.origPackets = packets;
      this.origBytes = bytes;
      this.hasOrigCounters = true;
    }
  }

  private timestamp(start: number, end: number): void {
    const b = this.buf;
    let o = start;
    while (o + 4 <= end) {
      const len = b[o]! | (b[o + 1]! << 8);
      const type = (b[o + 2]! | (b[o + 3]! << 8)) & 0x3fff;
      if (len < 4 || o + len > end) throw overrun(type, len, o - this.start);
      if (type === C.CTA_TIMESTAMP_START) {
        if (len - 4 < 8) throw short('CTA_TIMESTAMP_START', len - 4, 8, o + 4 - this.start);
        this.startOff = o + 4;
      }
      o += (len + 3) & ~3;
    }
  }

  private protoinfo(start: number, end: number): void {
    const b = this.buf;
    const base = this.start;
    let o = start;
    while (o + 4 <= end) {
      const len = b[o]! | (b[o + 1]! << 8);
      const type = (b[o + 2]! | (b[o + 3]! << 8)) & 0x3fff;
      if (len < 4 || o + len > end) throw overrun(type, len, o - base);
      if (type === C.CTA_PROTOINFO_TCP) {
        const tend = o + len;
        let q = o + 4;
        while (q + 4 <= tend) {
          const l2 = b[q]! | (b[q + 1]! << 8);
          const t2 = (b[q + 2]! | (b[q + 3]! << 8)) & 0x3fff;
          if (l2 < 4 || q + l2 > tend) throw overrun(t2, l2, q - base);
          if (t2 === C.CTA_PROTOINFO_TCP_STATE) {
            if (l2 - 4 < 1) throw short('CTA_PROTOINFO_TCP_STATE', l2 - 4, 1, q + 4 - base);
            this.tcpState = b[q + 4]!;
          }
          q += (l2 + 3) & ~3;
        }
      }
      o += (len + 3) & ~3;
    }
  }

  /** Protocol name as conntrack(8) prints it. */
  protoName(): string {
    return protoName(this.orig.protoNum);
  }

  /** TCP state name, undefined when the message carried none. */
  tcpStateName(): string | undefined {
    return this.tcpState === NONE ? undefined : tcpStateName(this.tcpState);
  }

  /** The decoded message as a ConntrackEntry (its own strings: valid after the buffer is reused). */
  toEntry(): ConntrackEntry {
    const b = this.buf;
    // One literal, one field order, so entries share an object shape (tcpState stays, undefined, for other protocols).
    const entry: ConntrackEntry = {
      family: this.family,
      proto: protoName(this.orig.protoNum),
      orig: this.orig.toTuple(b),
      reply: this.reply.toTuple(b),
      tcpState: this.tcpStateName(),
      status: this.status,
      statusFlags: statusFlagNames(this.status),
      timeoutS: this.timeoutS,
      mark: this.mark,
      zone: this.zone,
      id: this.id,
    };
    if (this.use === NONE && !this.hasOrigCounters && !this.hasReplyCounters && this.startOff === NONE) return entry;
    const opt: { use?: number; origCounters?: ConntrackCounters; replyCounters?: ConntrackCounters; startNs?: bigint } =
      {};
    if (this.use !== NONE) opt.use = this.use;
    if (this.hasOrigCounters) opt.origCounters = { packets: this.origPackets, bytes: this.origBytes };
    if (this.hasReplyCounters) opt.replyCounters = { packets: this.replyPackets, bytes: this.replyBytes };
    if (this.startOff !== NONE) opt.startNs = b.readBigUInt64BE(this.startOff);
    return Object.assign(entry, opt);
  }
}

const protoName = (n: number): string => C.PROTO_NAMES[n] ?? String(n);
const tcpStateName = (s: number): string => C.TCP_STATES[s] ?? String(s);

const flagNames = new Map<number, string[]>();

/** The IPS_* names of a status word: one shared, frozen list per distinct word, since nodes see few words. */
export function statusFlagNames(status: number): string[] {
  let names = flagNames.get(status);
  if (!names) {
    const out: string[] = [];
    for (let i = 0; i < C.STATUS_NAMES.length; i++) if (status & (1 << i)) out.push(C.STATUS_NAMES[i]!);
    names = Object.freeze(out.slice()) as string[];
    // Status words are a small set in practice; the bound only guards against garbage input.
    if (flagNames.size < 4096) flagNames.set(status, names);
  }
  return names;
}

const sharedView = new CtView();

/** Decodes the payload of an IPCTNL_MSG_CT_NEW/DELETE message (nfgenmsg + attributes). */
export function decodeEntry(buf: Buffer): ConntrackEntry {
  return sharedView.decode(buf, 0, buf.length).toEntry();
}

/** NEW (flags CREATE|EXCL), UPDATE (NEW without them) or DESTROY; undefined for other messages. */
export function eventType(msg: NetlinkMessage): ConntrackEventType | undefined {
  const t = msg.type >> 8 === C.NFNL_SUBSYS_CTNETLINK ? msg.type & 0xff : undefined;
  if (t === C.IPCTNL_MSG_CT_DELETE) return 'DESTROY';
  if (t !== C.IPCTNL_MSG_CT_NEW) return undefined;
  return msg.flags & (NLM_F_CREATE | NLM_F_EXCL) ? 'NEW' : 'UPDATE';
}
