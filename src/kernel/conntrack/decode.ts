// Decodes ctnetlink messages (big-endian integers) in place: CtView reads one message into reused numeric fields,
// so a dump that counts or keeps few entries allocates nothing for the rest; toEntry() builds a kept entry.
import { formatIP } from '../ip.js';
import {
  AttrCursor,
  type NetlinkMessage,
  NetlinkParseError,
  NLM_F_CREATE,
  NLM_F_EXCL,
  needLen,
} from '../netlink/codec.js';
import type { ConntrackEntry, ConntrackEventType, ConntrackTuple } from '../types.js';
import * as C from './constants.js';

const be16 = (buf: Buffer, o: number): number => (buf[o]! << 8) | buf[o + 1]!;
const be32 = (buf: Buffer, o: number): number =>
  ((buf[o]! << 24) | (buf[o + 1]! << 16) | (buf[o + 2]! << 8) | buf[o + 3]!) >>> 0;

function readBe64(buf: Buffer, off: number): number {
  // Counters fit in 2^53 for any realistic uptime; exactness beyond is not needed.
  return be32(buf, off) * 0x100000000 + be32(buf, off + 4);
}

export type Accounting = Pick<ConntrackEntry, 'origCounters' | 'replyCounters' | 'startNs'>;

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
      src: formatIP(buf, this.srcOff, this.srcLen),
      dst: formatIP(buf, this.dstOff, this.dstLen),
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

/** CTA_IP_* names by attribute type, for errors. */
const IP_ATTR_NAMES = ['', 'CTA_IP_V4_SRC', 'CTA_IP_V4_DST', 'CTA_IP_V6_SRC', 'CTA_IP_V6_DST'];
const ATTRIBUTE = 'conntrack attribute';

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
  /** CTA_PROTOINFO_SCTP_STATE, NONE when absent. */
  sctpState = NONE;
  use = NONE;
  origPackets = NONE;
  origBytes = NONE;
  replyPackets = NONE;
  replyBytes = NONE;
  hasOrigCounters = false;
  hasReplyCounters = false;
  /** Offset of CTA_TIMESTAMP_START's 8 bytes, NONE when absent. */
  startOff = NONE;
  /** One cursor per nesting level below the message, reused for every message. */
  private readonly top = new AttrCursor(ATTRIBUTE);
  private readonly nested = new AttrCursor(ATTRIBUTE);
  private readonly inner = new AttrCursor(ATTRIBUTE);

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
    this.tcpState = this.sctpState = this.use = this.startOff = NONE;
    this.origPackets = this.origBytes = this.replyPackets = this.replyBytes = NONE;
    const a = this.top.reset(start + C.NFGENMSG_LEN, end, start);
    while (a.next(b)) {
      switch (a.type) {
        case C.CTA_TUPLE_ORIG:
          this.tuple(this.orig, a);
          this.hasOrig = true;
          break;
        case C.CTA_TUPLE_REPLY:
          this.tuple(this.reply, a);
          this.hasReply = true;
          break;
        case C.CTA_STATUS:
          this.status = be32(b, this.sized(a, 4, 'CTA_STATUS'));
          break;
        case C.CTA_TIMEOUT:
          this.timeoutS = be32(b, this.sized(a, 4, 'CTA_TIMEOUT'));
          break;
        case C.CTA_MARK:
          this.mark = be32(b, this.sized(a, 4, 'CTA_MARK'));
          break;
        case C.CTA_ZONE:
          this.zone = be16(b, this.sized(a, 2, 'CTA_ZONE'));
          break;
        case C.CTA_ID:
          this.id = be32(b, this.sized(a, 4, 'CTA_ID'));
          break;
        case C.CTA_USE:
          this.use = be32(b, this.sized(a, 4, 'CTA_USE'));
          break;
        case C.CTA_COUNTERS_ORIG:
        case C.CTA_COUNTERS_REPLY:
          this.counters(a, a.type === C.CTA_COUNTERS_REPLY);
          break;
        case C.CTA_TIMESTAMP:
          for (const t = this.nested.reset(a.vs, a.ve, start); t.next(b); )
            if (t.type === C.CTA_TIMESTAMP_START) this.startOff = this.sized(t, 8, 'CTA_TIMESTAMP_START');
          break;
        case C.CTA_PROTOINFO:
          this.protoInfo(a);
          break;
      }
    }
    if (!this.hasOrig) throw new NetlinkParseError('conntrack entry without CTA_TUPLE_ORIG', C.NFGENMSG_LEN);
    // DESTROY events may omit the reply tuple on some kernels; mirror the original then.
    if (!this.hasReply) this.reply.mirrorOf(this.orig);
    return this;
  }

  /** CTA_PROTOINFO: the TCP or SCTP state (both a u8 attribute 1 in their nest). */
  private protoInfo(a: AttrCursor): void {
    const b = this.buf;
    for (const p = this.nested.reset(a.vs, a.ve, this.start); p.next(b); ) {
      if (p.type === C.CTA_PROTOINFO_TCP) {
        for (const t = this.inner.reset(p.vs, p.ve, this.start); t.next(b); )
          if (t.type === C.CTA_PROTOINFO_TCP_STATE) this.tcpState = b[this.sized(t, 1, 'CTA_PROTOINFO_TCP_STATE')]!;
      } else if (p.type === C.CTA_PROTOINFO_SCTP) {
        for (const t = this.inner.reset(p.vs, p.ve, this.start); t.next(b); )
          if (t.type === C.CTA_PROTOINFO_SCTP_STATE) this.sctpState = b[this.sized(t, 1, 'CTA_PROTOINFO_SCTP_STATE')]!;
      }
    }
  }

  /** Where the value of the attribute at `a` starts, once it is known to hold `size` bytes. */
  private sized(a: AttrCursor, size: number, name: string): number {
    needLen(a.ve - a.vs, size, name, a.vs - this.start);
    return a.vs;
  }

  /** Reads the tuple nested in the attribute at `a`; a NetlinkParseError when it has no addresses. */
  private tuple(t: CtTupleView, a: AttrCursor): void {
    const b = this.buf;
    t.clear();
    for (const part = this.nested.reset(a.vs, a.ve, this.start); part.next(b); ) {
      if (part.type === C.CTA_TUPLE_IP) this.tupleIp(t, part);
      else if (part.type === C.CTA_TUPLE_PROTO) this.tupleProto(t, part);
    }
    if (t.srcOff === NONE || t.dstOff === NONE)
      throw new NetlinkParseError('conntrack tuple without addresses', a.vs - this.start);
  }

  private tupleIp(tuple: CtTupleView, part: AttrCursor): void {
    for (const a = this.inner.reset(part.vs, part.ve, this.start); a.next(this.buf); ) {
      if (a.type < C.CTA_IP_V4_SRC || a.type > C.CTA_IP_V6_DST) continue;
      const size = a.type <= C.CTA_IP_V4_DST ? 4 : 16;
      const at = this.sized(a, size, IP_ATTR_NAMES[a.type]!);
      if (a.type === C.CTA_IP_V4_SRC || a.type === C.CTA_IP_V6_SRC) {
        tuple.srcOff = at;
        tuple.srcLen = size;
      } else {
        tuple.dstOff = at;
        tuple.dstLen = size;
      }
    }
  }

  private tupleProto(tuple: CtTupleView, part: AttrCursor): void {
    const b = this.buf;
    for (const a = this.inner.reset(part.vs, part.ve, this.start); a.next(b); ) {
      switch (a.type) {
        case C.CTA_PROTO_NUM:
          tuple.protoNum = b[this.sized(a, 1, 'CTA_PROTO_NUM')]!;
          break;
        case C.CTA_PROTO_SRC_PORT:
          tuple.sport = be16(b, this.sized(a, 2, 'CTA_PROTO_SRC_PORT'));
          break;
        case C.CTA_PROTO_DST_PORT:
          tuple.dport = be16(b, this.sized(a, 2, 'CTA_PROTO_DST_PORT'));
          break;
        case C.CTA_PROTO_ICMP_ID:
        case C.CTA_PROTO_ICMPV6_ID:
          tuple.icmpId = be16(b, this.sized(a, 2, 'CTA_PROTO_ICMP_ID'));
          break;
        case C.CTA_PROTO_ICMP_TYPE:
        case C.CTA_PROTO_ICMPV6_TYPE:
          tuple.icmpType = b[this.sized(a, 1, 'CTA_PROTO_ICMP_TYPE')]!;
          break;
        case C.CTA_PROTO_ICMP_CODE:
        case C.CTA_PROTO_ICMPV6_CODE:
          tuple.icmpCode = b[this.sized(a, 1, 'CTA_PROTO_ICMP_CODE')]!;
          break;
      }
    }
  }

  /** CTA_COUNTERS_ORIG/REPLY: 64-bit counters, or 32-bit ones from old kernels. */
  private counters(a: AttrCursor, reply: boolean): void {
    const b = this.buf;
    let packets = 0;
    let bytes = 0;
    for (const c = this.nested.reset(a.vs, a.ve, this.start); c.next(b); ) {
      if (c.type === C.CTA_COUNTERS_PACKETS) packets = readBe64(b, this.sized(c, 8, 'CTA_COUNTERS_PACKETS'));
      else if (c.type === C.CTA_COUNTERS_BYTES) bytes = readBe64(b, this.sized(c, 8, 'CTA_COUNTERS_BYTES'));
      else if (c.type === C.CTA_COUNTERS32_PACKETS) packets = be32(b, this.sized(c, 4, 'CTA_COUNTERS32_PACKETS'));
      else if (c.type === C.CTA_COUNTERS32_BYTES) bytes = be32(b, this.sized(c, 4, 'CTA_COUNTERS32_BYTES'));
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

  /** Protocol name as conntrack(8) prints it. */
  protoName(): string {
    return protoName(this.orig.protoNum);
  }

  /** TCP state name, undefined when the message carried none. */
  tcpStateName(): string | undefined {
    return this.tcpState === NONE ? undefined : tcpStateName(this.tcpState);
  }

  /** SCTP state name, undefined when the message carried none. */
  sctpStateName(): string | undefined {
    return this.sctpState === NONE ? undefined : (C.SCTP_STATES[this.sctpState] ?? String(this.sctpState));
  }

  /** The protocol's state as conntrack(8) prints it (TCP or SCTP), undefined for stateless protocols. */
  stateName(): string | undefined {
    return this.tcpStateName() ?? this.sctpStateName();
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
    if (this.sctpState !== NONE) entry.sctpState = this.sctpStateName();
    if (this.use !== NONE) entry.use = this.use;
    return Object.assign(entry, this.accounting());
  }

  /** The counters and start time, which entries carry only with accounting or timestamps on (off by default). */
  accounting(): Accounting | undefined {
    if (!this.hasOrigCounters && !this.hasReplyCounters && this.startOff === NONE) return undefined;
    const acct: Accounting = {};
    if (this.hasOrigCounters) acct.origCounters = { packets: this.origPackets, bytes: this.origBytes };
    if (this.hasReplyCounters) acct.replyCounters = { packets: this.replyPackets, bytes: this.replyBytes };
    if (this.startOff !== NONE) acct.startNs = this.buf.readBigUInt64BE(this.startOff);
    return acct;
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
