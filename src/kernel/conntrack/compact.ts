// The form in which the agent keeps a conntrack entry while the flow lives (src/agent/conntrack-table.ts), built
// straight from CtView so an event allocates only what is kept: nothing for a DESTROY, one object for an UPDATE.
import { LOWER_PROTOCOL_NUMBERS } from '../../model/protocol.js';
import { formatIP, formatIPv6, ipv4Number } from '../ip.js';
import type { ConntrackCounters, ConntrackEntry, ConntrackTuple, Family } from '../types.js';
import * as C from './constants.js';
import { type Accounting, type CtTupleView, type CtView, NONE, statusFlagNames } from './decode.js';

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
  static of(tuple: ConntrackTuple): PackedTuple | undefined {
    if (tuple.icmpId !== undefined || tuple.icmpType !== undefined || tuple.icmpCode !== undefined) return undefined;
    return new PackedTuple(tuple.src, tuple.dst, tuple.protoNum, tuple.sport, tuple.dport);
  }

  /** undefined for an ICMP tuple. */
  static ofView(tuple: CtTupleView, buf: Buffer): PackedTuple | undefined {
    if (tuple.icmpId !== NONE || tuple.icmpType !== NONE || tuple.icmpCode !== NONE) return undefined;
    const sport = tuple.sport === NONE ? undefined : tuple.sport;
    const dport = tuple.dport === NONE ? undefined : tuple.dport;
    return new PackedTuple(
      formatIP(buf, tuple.srcOff, tuple.srcLen),
      formatIP(buf, tuple.dstOff, tuple.dstLen),
      tuple.protoNum,
      sport,
      dport,
    );
  }

  /** The same fields as the message's tuple (an entry's tuples never change: a new version shares them). */
  sameAsView(tuple: CtTupleView, buf: Buffer): boolean {
    return (
      this.protoNum === tuple.protoNum &&
      this.sport === (tuple.sport === NONE ? undefined : tuple.sport) &&
      this.dport === (tuple.dport === NONE ? undefined : tuple.dport) &&
      sameAddress(this.src, buf, tuple.srcOff, tuple.srcLen) &&
      sameAddress(this.dst, buf, tuple.dstOff, tuple.dstLen)
    );
  }

  sameAs(tuple: ConntrackTuple): boolean {
    return (
      this.protoNum === tuple.protoNum &&
      this.sport === tuple.sport &&
      this.dport === tuple.dport &&
      this.src === tuple.src &&
      this.dst === tuple.dst
    );
  }
}

/** Whether an address text is the one at b[off] (IPv4 compared as numbers: no string made). */
const sameAddress = (text: string, buf: Buffer, off: number, len: number): boolean =>
  len === 4 ? ipv4Number(text) === buf.readUInt32BE(off) : text === formatIPv6(buf, off);

/** conntrack(8)'s TCP and SCTP state names as they are in the constants, so that a kept entry shares them. */
const STATE_NAMES = new Map<string, string>([...C.TCP_STATES, ...C.SCTP_STATES].map((n) => [n, n]));

const { tcp: IPPROTO_TCP, sctp: IPPROTO_SCTP } = LOWER_PROTOCOL_NUMBERS;

/**
 * A kept conntrack entry: immutable, since the diagnosis compares examples by identity, and sharing its tuples
 * with the version it replaces.
 */
export class CompactEntry implements ConntrackEntry {
  private constructor(
    readonly family: Family,
    readonly orig: PackedTuple,
    readonly reply: PackedTuple,
    /** The TCP or SCTP state, a shared name (STATE_NAMES); undefined for other protocols. */
    private readonly state: string | undefined,
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

  get tcpState(): string | undefined {
    return this.orig.protoNum === IPPROTO_TCP ? this.state : undefined;
  }

  get sctpState(): string | undefined {
    return this.orig.protoNum === IPPROTO_SCTP ? this.state : undefined;
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
    if (this.sctpState !== undefined) e.sctpState = this.sctpState;
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
  static fromView(view: CtView, prev?: CompactEntry): CompactEntry | undefined {
    const b = view.buf;
    const orig = prev?.orig.sameAsView(view.orig, b) ? prev.orig : PackedTuple.ofView(view.orig, b);
    const reply = prev?.reply.sameAsView(view.reply, b) ? prev.reply : PackedTuple.ofView(view.reply, b);
    if (!orig || !reply) return undefined;
    return new CompactEntry(
      view.family,
      orig,
      reply,
      view.stateName(),
      view.status,
      view.timeoutS,
      view.mark,
      view.zone,
      view.id | 0,
      view.use === NONE ? undefined : view.use,
      view.accounting(),
    );
  }

  /** An entry decoded elsewhere (a bundle, a test) in this form; undefined for ICMP. */
  static fromEntry(entry: ConntrackEntry, prev?: CompactEntry): CompactEntry | undefined {
    if (entry instanceof CompactEntry) return entry;
    const orig = prev?.orig.sameAs(entry.orig) ? prev.orig : PackedTuple.of(entry.orig);
    const reply = prev?.reply.sameAs(entry.reply) ? prev.reply : PackedTuple.of(entry.reply);
    if (!orig || !reply) return undefined;
    const acct: Accounting | undefined =
      entry.origCounters || entry.replyCounters || entry.startNs !== undefined
        ? {
            ...(entry.origCounters ? { origCounters: entry.origCounters } : {}),
            ...(entry.replyCounters ? { replyCounters: entry.replyCounters } : {}),
            ...(entry.startNs !== undefined ? { startNs: entry.startNs } : {}),
          }
        : undefined;
    const protoState = entry.tcpState ?? entry.sctpState;
    const state = protoState === undefined ? undefined : (STATE_NAMES.get(protoState) ?? protoState);
    return new CompactEntry(
      entry.family,
      orig,
      reply,
      state,
      entry.status,
      entry.timeoutS,
      entry.mark,
      entry.zone,
      entry.id | 0,
      entry.use,
      acct,
    );
  }
}
