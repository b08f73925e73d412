// Decoding ctnetlink messages into ConntrackEntry. Hot path: a 1M-entry dump
// passes through here, so it walks attributes with plain loops (no closures,
// no intermediate maps). ctnetlink integers are big-endian.
import { formatIPv4, formatIPv6 } from '../ip.js';
import { AttrCursor, NetlinkParseError, type NetlinkMessage } from '../netlink/codec.js';
import type { ConntrackEntry, ConntrackEventType, ConntrackTuple } from '../types.js';
import * as C from './constants.js';

/** The codec's attribute cursor, naming conntrack attributes in its errors (one class: no subclass, one object shape). */
const attrs = (buf: Buffer, start: number, end: number): AttrCursor => new AttrCursor(buf, start, end, 'conntrack attribute');

function need(a: AttrCursor, n: number, what: string): void {
  if (a.ve - a.vs < n) throw new NetlinkParseError(`${what}: ${a.ve - a.vs} bytes, need ${n}`, a.vs);
}

const be16 = (b: Buffer, o: number): number => (b[o]! << 8) | b[o + 1]!;
const be32 = (b: Buffer, o: number): number => ((b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!) >>> 0;

function readBe64(b: Buffer, off: number): number {
  // Counters fit in 2^53 for any realistic uptime; exactness beyond is not needed.
  return be32(b, off) * 0x100000000 + be32(b, off + 4);
}

function decodeTuple(b: Buffer, start: number, end: number): ConntrackTuple {
  // The ports in the literal (undefined until read): a TCP/UDP tuple keeps all its fields inside the object.
  const t: ConntrackTuple = { src: '', dst: '', protoNum: 0, sport: undefined, dport: undefined };
  const a = attrs(b, start, end);
  while (a.next()) {
    if (a.type === C.CTA_TUPLE_IP) {
      const ip = attrs(b, a.vs, a.ve);
      while (ip.next()) {
        switch (ip.type) {
          case C.CTA_IP_V4_SRC:
            need(ip, 4, 'CTA_IP_V4_SRC');
            t.src = formatIPv4(b, ip.vs);
            break;
          case C.CTA_IP_V4_DST:
            need(ip, 4, 'CTA_IP_V4_DST');
            t.dst = formatIPv4(b, ip.vs);
            break;
          case C.CTA_IP_V6_SRC:
            need(ip, 16, 'CTA_IP_V6_SRC');
            t.src = formatIPv6(b, ip.vs);
            break;
          case C.CTA_IP_V6_DST:
            need(ip, 16, 'CTA_IP_V6_DST');
            t.dst = formatIPv6(b, ip.vs);
            break;
        }
      }
    } else if (a.type === C.CTA_TUPLE_PROTO) {
      const p = attrs(b, a.vs, a.ve);
      while (p.next()) {
        switch (p.type) {
          case C.CTA_PROTO_NUM:
            need(p, 1, 'CTA_PROTO_NUM');
            t.protoNum = b[p.vs]!;
            break;
          case C.CTA_PROTO_SRC_PORT:
            need(p, 2, 'CTA_PROTO_SRC_PORT');
            t.sport = be16(b, p.vs);
            break;
          case C.CTA_PROTO_DST_PORT:
            need(p, 2, 'CTA_PROTO_DST_PORT');
            t.dport = be16(b, p.vs);
            break;
          case C.CTA_PROTO_ICMP_ID:
          case C.CTA_PROTO_ICMPV6_ID:
            need(p, 2, 'CTA_PROTO_ICMP_ID');
            t.icmpId = be16(b, p.vs);
            break;
          case C.CTA_PROTO_ICMP_TYPE:
          case C.CTA_PROTO_ICMPV6_TYPE:
            need(p, 1, 'CTA_PROTO_ICMP_TYPE');
            t.icmpType = b[p.vs]!;
            break;
          case C.CTA_PROTO_ICMP_CODE:
          case C.CTA_PROTO_ICMPV6_CODE:
            need(p, 1, 'CTA_PROTO_ICMP_CODE');
            t.icmpCode = b[p.vs]!;
            break;
        }
      }
    }
  }
  if (!t.src || !t.dst) throw new NetlinkParseError('conntrack tuple without addresses', start);
  return t;
}

function decodeCounters(b: Buffer, start: number, end: number): { packets: number; bytes: number } {
  const c = { packets: 0, bytes: 0 };
  const a = attrs(b, start, end);
  while (a.next()) {
    if (a.type === C.CTA_COUNTERS_PACKETS) {
      need(a, 8, 'CTA_COUNTERS_PACKETS');
      c.packets = readBe64(b, a.vs);
    } else if (a.type === C.CTA_COUNTERS_BYTES) {
      need(a, 8, 'CTA_COUNTERS_BYTES');
      c.bytes = readBe64(b, a.vs);
    } else if (a.type === C.CTA_COUNTERS32_PACKETS) {
      need(a, 4, 'CTA_COUNTERS32_PACKETS');
      c.packets = be32(b, a.vs);
    } else if (a.type === C.CTA_COUNTERS32_BYTES) {
      need(a, 4, 'CTA_COUNTERS32_BYTES');
      c.bytes = be32(b, a.vs);
    }
  }
  return c;
}

const flagNames = new Map<number, string[]>();

/**
 * The IPS_* names of a status word. One shared, frozen list per distinct word (a node sees a few
 * dozen): at 10k events/s a fresh list each was 10k allocations a second, and each kept entry
 * held its own list, sized by push for 17 names (~150 bytes).
 */
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

/** Decodes the payload of an IPCTNL_MSG_CT_NEW/DELETE message (nfgenmsg + attributes). */
export function decodeEntry(p: Buffer): ConntrackEntry {
  if (p.length < C.NFGENMSG_LEN) throw new NetlinkParseError(`nfgenmsg: ${p.length} bytes, need 4`, 0);
  const fam = p[0];
  if (fam !== C.AF_INET && fam !== C.AF_INET6) throw new NetlinkParseError(`conntrack family ${fam}`, 0);
  let orig: ConntrackTuple | undefined;
  let reply: ConntrackTuple | undefined;
  let tcpState: string | undefined;
  // The optional attributes, set on the entry only when present.
  const opt: Pick<ConntrackEntry, 'use' | 'origCounters' | 'replyCounters' | 'startNs'> = {};
  const e = { status: 0, timeoutS: 0, mark: 0, zone: 0, id: 0 };
  const a = attrs(p, C.NFGENMSG_LEN, p.length);
  while (a.next()) {
    switch (a.type) {
      case C.CTA_TUPLE_ORIG:
        orig = decodeTuple(p, a.vs, a.ve);
        break;
      case C.CTA_TUPLE_REPLY:
        reply = decodeTuple(p, a.vs, a.ve);
        break;
      case C.CTA_STATUS:
        need(a, 4, 'CTA_STATUS');
        e.status = be32(p, a.vs);
        break;
      case C.CTA_TIMEOUT:
        need(a, 4, 'CTA_TIMEOUT');
        e.timeoutS = be32(p, a.vs);
        break;
      case C.CTA_MARK:
        need(a, 4, 'CTA_MARK');
        e.mark = be32(p, a.vs);
        break;
      case C.CTA_ZONE:
        need(a, 2, 'CTA_ZONE');
        e.zone = be16(p, a.vs);
        break;
      case C.CTA_ID:
        need(a, 4, 'CTA_ID');
        e.id = be32(p, a.vs);
        break;
      case C.CTA_USE:
        need(a, 4, 'CTA_USE');
        opt.use = be32(p, a.vs);
        break;
      case C.CTA_COUNTERS_ORIG:
        opt.origCounters = decodeCounters(p, a.vs, a.ve);
        break;
      case C.CTA_COUNTERS_REPLY:
        opt.replyCounters = decodeCounters(p, a.vs, a.ve);
        break;
      case C.CTA_TIMESTAMP: {
        const t = attrs(p, a.vs, a.ve);
        while (t.next()) {
          if (t.type === C.CTA_TIMESTAMP_START) {
            need(t, 8, 'CTA_TIMESTAMP_START');
            opt.startNs = p.readBigUInt64BE(t.vs);
          }
        }
        break;
      }
      case C.CTA_PROTOINFO: {
        const pi = attrs(p, a.vs, a.ve);
        while (pi.next()) {
          if (pi.type !== C.CTA_PROTOINFO_TCP) continue;
          const tcp = attrs(p, pi.vs, pi.ve);
          while (tcp.next()) {
            if (tcp.type === C.CTA_PROTOINFO_TCP_STATE) {
              need(tcp, 1, 'CTA_PROTOINFO_TCP_STATE');
              const s = p[tcp.vs]!;
              tcpState = C.TCP_STATES[s] ?? String(s);
            }
          }
        }
        break;
      }
    }
  }
  if (!orig) throw new NetlinkParseError('conntrack entry without CTA_TUPLE_ORIG', C.NFGENMSG_LEN);
  // DESTROY events may omit the reply tuple on some kernels; mirror the original then.
  if (!reply) reply = { ...orig, src: orig.dst, dst: orig.src, sport: orig.dport, dport: orig.sport };
  // One literal, one field order: entries share an object shape with their fields inside the object
  // (tcpState is there, undefined, for other protocols; deleting it would make a slow dictionary object).
  const entry: ConntrackEntry = {
    family: fam === C.AF_INET ? 4 : 6,
    proto: C.PROTO_NAMES[orig.protoNum] ?? String(orig.protoNum),
    orig,
    reply,
    tcpState,
    status: e.status,
    statusFlags: statusFlagNames(e.status),
    timeoutS: e.timeoutS,
    mark: e.mark,
    zone: e.zone,
    id: e.id,
  };
  return opt.use === undefined && !opt.origCounters && !opt.replyCounters && opt.startNs === undefined ? entry : Object.assign(entry, opt);
}

/** Message type of a ctnetlink message, or undefined if it is not ctnetlink. */
export function ctMessageType(m: NetlinkMessage): number | undefined {
  return m.type >> 8 === C.NFNL_SUBSYS_CTNETLINK ? m.type & 0xff : undefined;
}

const NLM_F_CREATE = 0x400;
const NLM_F_EXCL = 0x200;

/** NEW (flags CREATE|EXCL), UPDATE (NEW without them) or DESTROY; undefined for other messages. */
export function eventType(m: NetlinkMessage): ConntrackEventType | undefined {
  const t = ctMessageType(m);
  if (t === C.IPCTNL_MSG_CT_DELETE) return 'DESTROY';
  if (t !== C.IPCTNL_MSG_CT_NEW) return undefined;
  return m.flags & (NLM_F_CREATE | NLM_F_EXCL) ? 'NEW' : 'UPDATE';
}
