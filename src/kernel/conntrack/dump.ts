// Streaming conntrack dump over ctnetlink, filtered in user space; entries go out batch by batch, none is held here.

import type { SourceStatus } from '../../model/source-status.js';
import { parseIP } from '../ip.js';
import { type KeepMessage, MessageWriter, NetlinkParseError, NLM_F_DUMP, NLM_F_REQUEST } from '../netlink/codec.js';
import { type DumpResult, NETLINK_NETFILTER, NetlinkSocket, type RawDumper } from '../netlink/socket.js';
import { sourceFailure } from '../source.js';
import type { ConntrackEntry, ConntrackSummary } from '../types.js';
import * as C from './constants.js';
import { CtView } from './decode.js';
import type { ConntrackPrefilter } from './prefilter.js';

export interface ConntrackFilter {
  /** Keep entries with any tuple address among these; raw bytes are searched before decoding. */
  addresses?: string[];
}

/** The dump request: every entry of both families (filters run in user space). */
export function dumpRequest(): Buffer {
  return new MessageWriter((C.NFNL_SUBSYS_CTNETLINK << 8) | C.IPCTNL_MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP)
    .u8(0)
    .u8(0)
    .u16(0)
    .finish();
}

/** User-side address filter: a byte-level pre-check, then an exact check on the decoded entry. */
function addressMatcher(addresses: string[] | undefined) {
  if (!addresses?.length) return undefined;
  const raw = addresses.map(parseIP);
  const canon = new Set(raw.map((b) => (b.length === 4 ? [...b].join('.') : '')).filter(Boolean));
  const v6 = raw.filter((b) => b.length === 16);
  return {
    maybe: (payload: Buffer) => raw.some((b) => payload.indexOf(b, C.NFGENMSG_LEN) >= 0),
    exact: (e: ConntrackEntry) => {
      for (const a of [e.orig.src, e.orig.dst, e.reply.src, e.reply.dst]) {
        if (canon.has(a)) return true;
        if (v6.length && a.includes(':')) {
          const b = parseIP(a);
          if (v6.some((x) => x.equals(b))) return true;
        }
      }
      return false;
    },
  };
}

export interface DumpOptions {
  netns?: string;
  filter?: ConntrackFilter;
  /** Reuse an open NETLINK_NETFILTER socket (the caller closes it). */
  socket?: RawDumper;
  /** Skips messages before decoding when this says they cannot matter. */
  prefilter?: ConntrackPrefilter;
}

/** The socket-level pre-check of a prefilter: ctnetlink entry messages it rejects are dropped unparsed. */
export function keepFor(prefilter: () => ConntrackPrefilter | undefined): KeepMessage {
  return (buf, start, end, type) => {
    const p = prefilter();
    return !p || type >> 8 !== C.NFNL_SUBSYS_CTNETLINK || p.maybeIn(buf, start, end);
  };
}

/** A dump's counts. A malformed entry is skipped, counted and described; the dump goes on. */
export interface ConntrackDumpResult extends DumpResult {
  /** Entries handed over (after the filters). */
  entries: number;
  malformed: number;
  firstMalformed?: string;
}

/** What a dump says about the entries it skipped as malformed, for a status reason or a log line. */
export function malformedNote(r: Pick<ConntrackDumpResult, 'malformed' | 'firstMalformed'>): string | undefined {
  if (!r.malformed) return undefined;
  return (
    `${r.malformed} malformed conntrack ${r.malformed === 1 ? 'entry' : 'entries'} ` +
    `skipped (first: ${r.firstMalformed})`
  );
}

/**
 * Hands each entry passing the filters to onView as a CtView valid only during the call; a malformed entry is
 * skipped and counted, but a length header past its datagram fails the dump since nothing after it can be found.
 */
export async function dumpConntrackViews(
  onView: (view: CtView) => void,
  opts: DumpOptions = {},
  afterBatch?: () => void | Promise<void>,
): Promise<ConntrackDumpResult> {
  const sock = opts.socket ?? openConntrackSocket(opts.netns);
  const match = addressMatcher(opts.filter?.addresses);
  const pre = opts.prefilter;
  const total: ConntrackDumpResult = { messages: 0, interrupted: false, entries: 0, malformed: 0 };
  const view = new CtView();
  let seen = 0;
  try {
    const res = await sock.dumpRaw(
      dumpRequest(),
      'ctnetlink: dump',
      (buf, start, end, type) => {
        seen++;
        if (type >> 8 !== C.NFNL_SUBSYS_CTNETLINK || (type & 0xff) !== C.IPCTNL_MSG_CT_NEW) return;
        if (pre && !pre.maybeIn(buf, start, end)) return;
        if (match && !match.maybe(buf.subarray(start, end))) return;
        try {
          view.decode(buf, start, end);
        } catch (e) {
          if (!(e instanceof NetlinkParseError)) throw e;
          total.malformed++;
          total.firstMalformed ??= `message ${seen} of the dump: ${e.message}`;
          return;
        }
        if (match && !match.exact(view.toEntry())) return;
        total.entries++;
        onView(view);
      },
      afterBatch,
    );
    total.messages = res.messages;
    total.interrupted = res.interrupted;
    return total;
  } finally {
    if (!opts.socket) sock.close();
  }
}

/** Hands decoded entries to onEntries, one batch per receive call; a returned promise applies backpressure. */
export async function dumpConntrack(
  onEntries: (entries: ConntrackEntry[]) => void | Promise<void>,
  opts: DumpOptions = {},
): Promise<ConntrackDumpResult> {
  let out: ConntrackEntry[] = [];
  return dumpConntrackViews(
    (v) => void out.push(v.toEntry()),
    opts,
    () => {
      if (!out.length) return;
      const batch = out;
      out = [];
      return onEntries(batch);
    },
  );
}

export function openConntrackSocket(netns?: string): NetlinkSocket {
  return NetlinkSocket.open(NETLINK_NETFILTER, netns ? { netns } : {});
}

/** Counts for `snapshot`: total, by protocol, by TCP or SCTP state (others: REPLIED/UNREPLIED). */
export class SummaryCounter {
  readonly summary: ConntrackSummary = { total: 0, byProto: {}, byState: {} };
  add(entry: ConntrackEntry): void {
    this.count(entry.proto, entry.tcpState ?? entry.sctpState, entry.status);
  }
  /** The same count from a decoded view, without making the entry. */
  addView(view: CtView): void {
    this.count(view.protoName(), view.stateName(), view.status);
  }
  private count(proto: string, protoState: string | undefined, status: number): void {
    const s = this.summary;
    s.total++;
    s.byProto[proto] = (s.byProto[proto] ?? 0) + 1;
    const state = protoState ?? (status & C.IPS_SEEN_REPLY ? 'REPLIED' : 'UNREPLIED');
    s.byState[state] = (s.byState[state] ?? 0) + 1;
  }
}

/** Always summarises the whole table (after kernel filters) and keeps entries only when asked, so none is held. */
export async function readConntrack(opts: DumpOptions & { entries?: boolean } = {}): Promise<{
  status: SourceStatus;
  summary?: ConntrackSummary;
  entries?: ConntrackEntry[];
  interrupted?: boolean;
  malformed?: number;
}> {
  const t0 = performance.now();
  const counter = new SummaryCounter();
  const kept: ConntrackEntry[] = [];
  const match = addressMatcher(opts.filter?.addresses);
  try {
    // Strings are made only for the entries kept; the rest are counted from the view.
    const res = await dumpConntrackViews(
      (v) => {
        counter.addView(v);
        if (!opts.entries) return;
        if (!match) kept.push(v.toEntry());
        else if (match.maybe(v.buf.subarray(v.start, v.end))) {
          const e = v.toEntry();
          if (match.exact(e)) kept.push(e);
        }
      },
      { ...opts, filter: {} },
    );
    const status: SourceStatus = { source: 'conntrack', available: true, durationMs: performance.now() - t0 };
    const degraded = [
      res.interrupted ? 'the table changed during the dump (NLM_F_DUMP_INTR); counts are approximate' : undefined,
      malformedNote(res),
    ].filter((r): r is string => !!r);
    if (degraded.length) status.reason = degraded.join('; ');
    return {
      status,
      summary: counter.summary,
      ...(opts.entries ? { entries: kept } : {}),
      interrupted: res.interrupted,
      malformed: res.malformed,
    };
  } catch (e) {
    return { status: sourceFailure('conntrack', e, 'CAP_NET_ADMIN', t0) };
  }
}
