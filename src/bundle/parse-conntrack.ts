// `conntrack -L` / /proc/net/nf_conntrack text → ConntrackEntry; statusFlags are rebuilt from the tuples (NAT when
// the reply is not the original's mirror). A bad line warns with file and line; no entry line is a BundleParseError.
// Line: [ipv4 2] tcp 6 119 SYN_SENT src= dst= sport= dport= [packets= bytes=] [UNREPLIED] reply... [ASSURED] mark= use=
import {
  IPS_ASSURED,
  IPS_CONFIRMED,
  IPS_DST_NAT,
  IPS_SEEN_REPLY,
  IPS_SRC_NAT,
  STATUS_NAMES,
} from '../kernel/conntrack/constants.js';
import { statusFlagNames } from '../kernel/conntrack/decode.js';
import { canonicalIP, ipFamily } from '../kernel/ip.js';
import { lineIssue } from '../kernel/nat/errors.js';
import type { ConntrackCounters, ConntrackEntry, ConntrackTuple, Family } from '../kernel/types.js';
import { LOWER_PROTOCOL_NUMBERS } from '../model/protocol.js';
import { BundleParseError, excerpt } from './errors.js';

export interface ConntrackText {
  entries: ConntrackEntry[];
  /** Problems with single lines ('file:line: detail'); those lines are skipped. */
  warnings: string[];
  /** The count in conntrack(8)'s "N flow entries have been shown" line, when the file has one. */
  reportedCount?: number;
}

/** A line that is not an entry; the message is the detail, without file and line. */
class ConntrackLineError extends Error {}

const L3 = { ipv4: [4, 2], ipv6: [6, 10] } as const;
const SUMMARY = /^conntrack v[\d.]+ \(conntrack-tools\): (\d+) flow entries have been shown\.$/;
const TOOL_MESSAGE = /^conntrack v[\d.]+ \(conntrack-tools\): /;
/** Protocols whose tuples carry ports (IPPROTO numbers). */
const PORT_PROTOS = new Set([6, 17, 33, 132, 136]);
const ICMP_PROTOS = new Set([1, 58]);
/** Keys after the tuples that conntrack(8) or /proc may print and that we do not keep. */
const IGNORED_KEYS = new Set(['secctx', 'helper', 'labels', 'delta-time', 'zone-orig', 'zone-reply', 'timestamp']);
/** Bracketed flags that set a status bit ([UNREPLIED] clears SEEN_REPLY instead). */
const FLAG_BITS = new Map([
  ['ASSURED', IPS_ASSURED],
  ['OFFLOAD', 1 << STATUS_NAMES.indexOf('OFFLOAD')],
  ['HW_OFFLOAD', 1 << STATUS_NAMES.indexOf('HW_OFFLOAD')],
]);
const ANY = Number.MAX_SAFE_INTEGER;
/** Numeric tuple fields and their largest values; messages name type, code and id as ICMP's. */
const TUPLE_MAX = { sport: 65535, dport: 65535, type: 255, code: 255, id: 65535, packets: ANY, bytes: ANY };
const ICMP_KEYS = new Set(['type', 'code', 'id']);
/** GRE keys, SCTP verification tags: tuple fields the detectors do not use. */
const UNUSED_TUPLE_KEYS = new Set(['srckey', 'dstkey', 'vtag']);
/** Numeric fields after the tuples and their largest values. */
const ENTRY_MAX: Record<string, number> = { mark: ANY, zone: 65535, use: ANY, id: ANY };

export function parseConntrackText(text: string, file: string): ConntrackText {
  const entries: ConntrackEntry[] = [];
  const warnings: string[] = [];
  let reportedCount: number | undefined;
  let firstBad: { line: number; detail: string } | undefined;
  let skipped = 0;
  const lines = text.split('\n');
  for (let idx = 0; idx < lines.length; idx++) {
    const line = lines[idx]!.replace(/\r$/, '').trim();
    if (line === '' || line.startsWith('#')) continue;
    const summary = SUMMARY.exec(line);
    if (summary) {
      reportedCount = Number(summary[1]);
      continue;
    }
    if (TOOL_MESSAGE.test(line)) {
      // e.g. "Operation failed: ..." saved along with the output.
      warnings.push(lineIssue(file, idx + 1, `conntrack reported: ${line.replace(TOOL_MESSAGE, '')}`));
      continue;
    }
    try {
      entries.push(parseConntrackLine(line));
    } catch (e) {
      if (!(e instanceof ConntrackLineError)) throw e;
      firstBad ??= { line: idx + 1, detail: e.message };
      skipped++;
      warnings.push(lineIssue(file, idx + 1, `line skipped: ${e.message}`));
    }
  }
  if (entries.length === 0 && firstBad) {
    throw new BundleParseError(
      file,
      firstBad.line,
      `not conntrack -L or /proc/net/nf_conntrack output: ${firstBad.detail}`,
    );
  }
  if (reportedCount !== undefined && reportedCount !== entries.length + skipped) {
    warnings.push(
      `${file}: conntrack reported ${reportedCount} entries but the file holds ${entries.length + skipped}: truncated?`,
    );
  }
  return { entries, warnings, ...(reportedCount !== undefined ? { reportedCount } : {}) };
}

type TupleNumber = keyof typeof TUPLE_MAX;
type TupleBuilder = { src?: string; dst?: string } & Partial<Record<TupleNumber, number>>;

/** One entry line of any of the accepted forms. Throws ConntrackLineError. */
export function parseConntrackLine(line: string): ConntrackEntry {
  const tok = line.trim().split(/\s+/);
  let i = 0;
  let family: Family | undefined;
  const l3 = L3[tok[0] as keyof typeof L3];
  if (l3) {
    if (tok[1] !== String(l3[1])) bad(`'${tok[0]}' followed by ${quote(tok[1])}, expected ${l3[1]}`);
    family = l3[0];
    i = 2;
  }
  const proto = tok[i];
  if (!proto || !/^[a-z][a-z0-9-]*$/.test(proto)) bad(`expected a protocol name, got ${quote(proto)}`);
  const protoNum = uint(tok[i + 1], 'protocol number', 255);
  const timeoutS = uint(tok[i + 2], 'timeout');
  i += 3;
  // The protocol's state, which conntrack prints for TCP and SCTP.
  let state: string | undefined;
  if (tok[i] !== undefined && /^[A-Z][A-Z0-9_]*$/.test(tok[i]!)) state = tok[i++];

  const tuples: [TupleBuilder, TupleBuilder] = [{}, {}];
  let phase: 0 | 1 | 2 = 0; // original tuple, reply tuple, after the tuples
  let status = IPS_CONFIRMED | IPS_SEEN_REPLY;
  const numbers: Record<string, number> = {};
  for (; i < tok.length; i++) {
    const t = tok[i]!;
    if (t.startsWith('[')) {
      if (!t.endsWith(']')) bad(`unterminated flag ${quote(t)}`);
      const flag = t.slice(1, -1);
      if (flag === 'UNREPLIED') status &= ~IPS_SEEN_REPLY;
      else {
        status |= FLAG_BITS.get(flag) ?? 0;
        if (phase === 1) phase = 2;
      }
      continue;
    }
    const eq = t.indexOf('=');
    if (eq <= 0) bad(`unexpected ${quote(t)} (truncated line?)`);
    const key = t.slice(0, eq);
    const value = t.slice(eq + 1);
    if (key === 'src' && phase === 0 && tuples[0].src !== undefined) phase = 1;
    else if (key === 'src' && phase === 1 && tuples[1].src !== undefined) bad('a third tuple');
    if (phase !== 2 && applyTupleKey(tuples[phase], key, value)) continue;
    if (phase === 1) phase = 2;
    if (phase === 0) bad(`${quote(t)} before the reply tuple (truncated line?)`);
    if (Object.hasOwn(ENTRY_MAX, key)) numbers[key] = uint(value, key, ENTRY_MAX[key]);
    else if (!IGNORED_KEYS.has(key)) bad(`unknown field ${quote(t)}`);
  }

  const orig = finishTuple(tuples[0], protoNum, 'original');
  if (tuples[1].src === undefined) bad('no reply tuple (truncated line?)');
  const reply = finishTuple(tuples[1], protoNum, 'reply');
  const fam = ipFamily(orig.src) as Family;
  if (family !== undefined && family !== fam) bad(`addresses are IPv${fam} on an ipv${family} line`);
  if ([orig.dst, reply.src, reply.dst].some((a) => ipFamily(a) !== fam)) bad('tuples mix IPv4 and IPv6 addresses');
  if (reply.dst !== orig.src || reply.dport !== orig.sport) status |= IPS_SRC_NAT;
  if (reply.src !== orig.dst || reply.sport !== orig.dport) status |= IPS_DST_NAT;

  const entry: ConntrackEntry = {
    family: fam,
    proto: proto!,
    orig,
    reply,
    status,
    statusFlags: statusFlagNames(status),
    timeoutS,
    mark: numbers.mark ?? 0,
    zone: numbers.zone ?? 0,
    id: numbers.id ?? 0,
  };
  if (state !== undefined && protoNum === LOWER_PROTOCOL_NUMBERS.tcp) entry.tcpState = state;
  if (state !== undefined && protoNum === LOWER_PROTOCOL_NUMBERS.sctp) entry.sctpState = state;
  if (numbers.use !== undefined) entry.use = numbers.use;
  const oc = counters(tuples[0]);
  const rc = counters(tuples[1]);
  if (oc) entry.origCounters = oc;
  if (rc) entry.replyCounters = rc;
  return entry;
}

/** Stores a tuple field; false when `key` is not one (then the tuple is over). */
function applyTupleKey(tuple: TupleBuilder, key: string, value: string): boolean {
  if (key === 'src' || key === 'dst') {
    if (tuple[key] !== undefined) bad(`${key}= twice in one tuple`);
    tuple[key] = address(value, key);
    return true;
  }
  // ICMP's id belongs to the tuple; the entry's id (-o id) comes after the tuples.
  if (key === 'id' && (tuple.type === undefined || tuple.id !== undefined)) return false;
  if (!Object.hasOwn(TUPLE_MAX, key)) return UNUSED_TUPLE_KEYS.has(key);
  const field = key as TupleNumber;
  tuple[field] = uint(value, ICMP_KEYS.has(key) ? `icmp ${key}` : key, TUPLE_MAX[field]);
  return true;
}

function finishTuple(tuple: TupleBuilder, protoNum: number, which: string): ConntrackTuple {
  if (tuple.src === undefined || tuple.dst === undefined) bad(`${which} tuple without src= and dst=`);
  const out: ConntrackTuple = { src: tuple.src!, dst: tuple.dst!, protoNum };
  if (PORT_PROTOS.has(protoNum)) {
    if (tuple.sport === undefined || tuple.dport === undefined) bad(`${which} tuple without sport= and dport=`);
    out.sport = tuple.sport;
    out.dport = tuple.dport;
  } else if (ICMP_PROTOS.has(protoNum)) {
    if (tuple.type === undefined || tuple.code === undefined) bad(`${which} tuple without type= and code=`);
    out.icmpType = tuple.type;
    out.icmpCode = tuple.code;
    if (tuple.id !== undefined) out.icmpId = tuple.id;
  }
  return out;
}

function counters(builder: TupleBuilder): ConntrackCounters | undefined {
  if (builder.packets === undefined && builder.bytes === undefined) return undefined;
  return { packets: builder.packets ?? 0, bytes: builder.bytes ?? 0 };
}

/** Canonical forms of addresses already seen: a table repeats its pod IPs and VIPs a lot. */
const canonical = new Map<string, string>();

function address(value: string, key: string): string {
  let c = canonical.get(value);
  if (c !== undefined) return c;
  const fam = ipFamily(value);
  if (fam === 0 || value.includes('%')) bad(`${key}=${JSON.stringify(value)} is not an IP address`);
  // IPv4 text is already canonical (leading zeros rejected above); IPv6 may be in /proc's uncompressed form.
  c = fam === 4 ? value : canonicalIP(value);
  if (canonical.size >= 65536) canonical.clear();
  canonical.set(value, c);
  return c;
}

function uint(s: string | undefined, what: string, max = Number.MAX_SAFE_INTEGER): number {
  if (s === undefined) bad(`missing ${what} (truncated line?)`);
  if (!/^\d+$/.test(s!) || Number(s) > max) bad(`${what} ${quote(s)} is not a number up to ${max}`);
  return Number(s);
}

function quote(s: string | undefined): string {
  return s === undefined ? 'end of line' : excerpt(s, 40);
}

function bad(detail: string): never {
  throw new ConntrackLineError(detail);
}
