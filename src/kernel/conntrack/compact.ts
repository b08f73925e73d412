// The form in which the agent keeps a conntrack entry while the flow lives (src/agent/conntrack-table.ts), built
// straight from CtView so an event allocates only what is kept: nothing for a DESTROY, one object for an UPDATE.
import { formatIPv6, ipv4Number } from '../ip.js';
import type { ConntrackCounters, ConntrackEntry, ConntrackTuple, Family } from '../types.js';
import * as C from './constants.js';
import { type CtTupleView, type CtView, formatAddr, NONE, statusFlagNames } from './decode.js';

/** One direction of a port-based entry (TCP, UDP, SCTP, ...): the agent keeps no other. */
export class PackedTuple implements ConntrackTuple {
  constructor(
    readonly src: string,
    readonly dst: string,
    readonly protoNum: number,
    readonly sport: number | undefined,
    readonly dport: number | undefined,
  ) {}

  /** The tuple as the decoder makes it (its field order: JSON reads the same). */
  toJSON(): ConntrackTuple {
    return { src: this.src, dst: this.dst, protoNum: this.protoNum, sport: this.sport, dport: this.dport };
  }

  /** undefined for an ICMP tuple (id/type/code), which this form does not hold. */
  static of(t: ConntrackTuple): PackedTuple | undefined {
    if (t.icmpId !== undefined || t.icmpType !== undefined || t.icmpCode !== undefined) return undefined;
    return new PackedTuple(t.src, t.dst, t.protoNum, t.sport, t.dport);
  }

  /** undefined for an ICMP tuple. */
  static ofView(v: CtTupleView, b: Buffer): PackedTuple | undefined {
    if (v.icmpId !== NONE || v.icmpType !== NONE || v.icmpCode !== NONE) return undefined;
    const sport = v.sport === NONE ? undefined : v.sport;
    const dport = v.dport === NONE ? undefined : v.dport;
    return new PackedTuple(
      formatAddr(b, v.srcOff, v.srcLen),
      formatAddr(b, v.dstOff, v.dstLen),
      v.protoNum,
      sport,
      dport,
    );
  }

  /** The same fields as the message's tuple (an entry's tuples never change: a new version shares them). */
  sameAsView(v: CtTupleView, b: Buffer): boolean {
    return (
      this.protoNum === v.protoNum &&
      this.sport === (v.sport === NONE ? undefined : v.sport) &&
      this.dport === (v.dport === NONE ? undefined : v.dport) &&
      sameAddress(this.src, b, v.srcOff, v.srcLen) &&
      sameAddress(this.dst, b, v.dstOff, v.dstLen)
    );
  }

  sameAs(t: ConntrackTuple): boolean {
    return (
      this.protoNum === t.protoNum &&
      this.sport === t.sport &&
      this.dport === t.dport &&
      this.src === t.src &&
      this.dst === t.dst
    );
  }
}

/** Whether an address text is the one at b[off] (IPv4 compared as numbers: no string made). */
const sameAddress = (text: string, b: Buffer, off: number, len: number): boolean =>
  len === 4 ? ipv4Number(text) === b.readUInt32BE(off) : text === formatIPv6(b, off);

/** What an entry carries only with accounting or timestamps on (off by default). */
interface Accounting {
  origCounters?: ConntrackCounters;
  replyCounters?: ConntrackCounters;
  startNs?: bigint;
}

/** conntrack(8)'s state names as they are in the constants, so that a kept entry shares them. */
const TCP_STATE_NAMES = new Map<string, string>(C.TCP_STATES.map((n) => [n, n]));

/**
 * A kept conntrack entry: immutable, since the diagnosis compares examples by identity, and sharing its tuples
 * with the version it replaces.
 */
export class CompactEntry implements ConntrackEntry {
  private constructor(
    readonly family: Family,
    readonly orig: PackedTuple,
    readonly reply: PackedTuple,
    /** A shared name (C.TCP_STATES), undefined for other protocols. */
    readonly tcpState: string | undefined,
    readonly status: number,
    readonly timeoutS: number,
    readonly mark: number,
    readonly zone: number,
    /** CTA_ID as a signed 32-bit integer so it stays a small integer; `id` is the unsigned value. */
    readonly id32: number,
    readonly use: number | undefined,
    private readonly acct: Accounting | undefined,
  ) {}

  get id(): number {
    return this.id32 >>> 0;
  }

  get proto(): string {
    return C.PROTO_NAMES[this.orig.protoNum] ?? String(this.orig.protoNum);
  }

  /** The names of the status bits (one shared list per status word). */
  get statusFlags(): string[] {
    return statusFlagNames(this.status);
  }

  get origCounters(): ConntrackCounters | undefined {
    return this.acct?.origCounters;
  }

  get replyCounters(): ConntrackCounters | undefined {
    return this.acct?.replyCounters;
  }

  get startNs(): bigint | undefined {
    return this.acct?.startNs;
  }

  /** The entry as the decoder makes it (CtView.toEntry: same fields, same order), for evidence. */
  toEntry(): ConntrackEntry {
    const e: ConntrackEntry = {
      family: this.family,
      proto: this.proto,
      orig: this.orig.toJSON(),
      reply: this.reply.toJSON(),
      tcpState: this.tcpState,
      status: this.status,
      statusFlags: this.statusFlags,
      timeoutS: this.timeoutS,
      mark: this.mark,
      zone: this.zone,
      id: this.id,
    };
    if (this.use !== undefined) e.use = this.use;
    if (this.acct?.origCounters) e.origCounters = this.acct.origCounters;
    if (this.acct?.replyCounters) e.replyCounters = this.acct.replyCounters;
    if (this.acct?.startNs !== undefined) e.startNs = this.acct.startNs;
    return e;
  }

  toJSON(): ConntrackEntry {
    return this.toEntry();
  }

  /** The decoded message in this form, reusing `prev`'s tuples when they are the same; undefined for ICMP. */
  static fromView(v: CtView, prev?: CompactEntry): CompactEntry | undefined {
    const b = v.buf;
    const orig = prev?.orig.sameAsView(v.orig, b) ? prev.orig : PackedTuple.ofView(v.orig, b);
    const reply = prev?.reply.sameAsView(v.reply, b) ? prev.reply : PackedTuple.ofView(v.reply, b);
    if (!orig || !reply) return undefined;
    let acct: Accounting | undefined;
    if (v.hasOrigCounters || v.hasReplyCounters || v.startOff !== NONE) {
      acct = {};
      if (v.hasOrigCounters) acct.origCounters = { packets: v.origPackets, bytes: v.origBytes };
      if (v.hasReplyCounters) acct.replyCounters = { packets: v.replyPackets, bytes: v.replyBytes };
      if (v.startOff !== NONE) acct.startNs = b.readBigUInt64BE(v.startOff);
    }
    return new CompactEntry(
      v.family,
      orig,
      reply,
      v.tcpStateName(),
      v.status,
      v.timeoutS,
      v.mark,
      v.zone,
      v.id | 0,
      v.use === NONE ? undefined : v.use,
      acct,
    );
  }

  /** An entry decoded elsewhere (a bundle, a test) in this form; undefined for ICMP. */
  static fromEntry(e: ConntrackEntry, prev?: CompactEntry): CompactEntry | undefined {
    if (e instanceof CompactEntry) return e;
    const orig = prev?.orig.sameAs(e.orig) ? prev.orig : PackedTuple.of(e.orig);
    const reply = prev?.reply.sameAs(e.reply) ? prev.reply : PackedTuple.of(e.reply);
    if (!orig || !reply) return undefined;
    const acct: Accounting | undefined =
      e.origCounters || e.replyCounters || e.startNs !== undefined
        ? {
            ...(e.origCounters ? { origCounters: e.origCounters } : {}),
            ...(e.replyCounters ? { replyCounters: e.replyCounters } : {}),
            ...(e.startNs !== undefined ? { startNs: e.startNs } : {}),
          }
        : undefined;
    const tcpState = e.tcpState === undefined ? undefined : (TCP_STATE_NAMES.get(e.tcpState) ?? e.tcpState);
    return new CompactEntry(
      e.family,
      orig,
      reply,
      tcpState,
      e.status,
      e.timeoutS,
      e.mark,
      e.zone,
      e.id | 0,
      e.use,
      acct,
    );
  }
}
