// Decodes IPVS generic netlink dump replies into IpvsVirtualServer / IpvsRealServer and encodes GET_DEST selectors;
// malformed input throws NetlinkParseError with offsets relative to the genl payload.
import { protocolOfNumber } from '../../model/protocol.js';
import { formatIP, formatIPv4 } from '../ip.js';
import {
  attrTable,
  type MessageWriter,
  NetlinkParseError,
  NLM_F_DUMP,
  NLM_F_REQUEST,
  readCString,
} from '../netlink/codec.js';
import { GENL_HDRLEN, genlMessage } from '../netlink/genl.js';
import type { Family, IpvsRealServer, IpvsStats, IpvsVirtualServer } from '../types.js';
import * as U from './uapi.js';

type Table = Map<number, [number, number]>;

/** What identifies a service in a GET_DEST request, exactly as the kernel sent it. */
export interface ServiceSelector {
  af: number;
  fwmark?: number;
  protocol?: number;
  /** The 16-byte union nf_inet_addr. */
  addr?: Buffer;
  /** Network byte order on the wire; a plain number here. */
  port?: number;
}

/** The kernel number's name, or the number when this reader knows no name for it. */
const nameOf = <T>(names: readonly T[], n: number): T | number => names[n] ?? n;

/** The value range of an attribute that must be present with at least len bytes. */
function attr(table: Table, type: number, name: string, len: number, container: number): [number, number] {
  const r = table.get(type);
  if (!r) throw new NetlinkParseError(`IPVS: ${name} missing`, container);
  return sized(r, name, len);
}

function optional(table: Table, type: number, name: string, len: number): [number, number] | undefined {
  const r = table.get(type);
  return r && sized(r, name, len);
}

function sized(r: [number, number], name: string, len: number): [number, number] {
  if (r[1] - r[0] < len) throw new NetlinkParseError(`IPVS: ${name} has ${r[1] - r[0]} bytes, need ${len}`, r[0]);
  return r;
}

/** The one nested attribute (SERVICE or DEST) a dump message carries, as a table of its members. */
function nested(payload: Buffer, type: number, name: string): { t: Table; start: number } {
  if (payload.length < GENL_HDRLEN) {
    throw new NetlinkParseError(`IPVS: message of ${payload.length} bytes has no genl header`, 0);
  }
  const r = attrTable(payload, GENL_HDRLEN, payload.length).get(type);
  if (!r) throw new NetlinkParseError(`IPVS: ${name} missing from the reply`, GENL_HDRLEN);
  return { t: attrTable(payload, r[0], r[1]), start: r[0] };
}

function family(af: number, name: string, off: number): Family {
  if (af === U.AF_INET) return 4;
  if (af === U.AF_INET6) return 6;
  throw new NetlinkParseError(`IPVS: ${name} ${af} is neither AF_INET nor AF_INET6`, off);
}

/** Counters are u32 or u64 depending on the attribute set (STATS vs STATS64); size tells which. */
function counter(buf: Buffer, s: number, e: number): number {
  if (e - s >= 8) return Number(buf.readBigUInt64LE(s)); // exact below 2^53 (8 PiB), plenty for counters
  if (e - s >= 4) return buf.readUInt32LE(s);
  throw new NetlinkParseError(`IPVS: stats counter of ${e - s} bytes`, s);
}

/** STATS64 when the kernel sends it (>= 4.1), else the 32-bit STATS. */
function stats(buf: Buffer, table: Table, stats64: number, stats32: number): IpvsStats | undefined {
  const r = table.get(stats64) ?? table.get(stats32);
  if (!r) return undefined;
  const st = attrTable(buf, r[0], r[1]);
  const out = {} as IpvsStats;
  for (const [i, key] of U.STATS_KEYS.entries()) {
    const v = st.get(i + 1);
    out[key] = v ? counter(buf, v[0], v[1]) : 0;
  }
  return out;
}

/** One IPVS_CMD_NEW_SERVICE dump message (genl header + attributes) → service without its real servers. */
export function decodeService(payload: Buffer): { service: IpvsVirtualServer; selector: ServiceSelector } {
  const { t, start } = nested(payload, U.IPVS_CMD_ATTR_SERVICE, 'IPVS_CMD_ATTR_SERVICE');
  const af = payload.readUInt16LE(attr(t, U.IPVS_SVC_ATTR_AF, 'IPVS_SVC_ATTR_AF', 2, start)[0]);
  const fam = family(af, 'IPVS_SVC_ATTR_AF', start);
  const scheduler = readCString(payload, ...attr(t, U.IPVS_SVC_ATTR_SCHED_NAME, 'IPVS_SVC_ATTR_SCHED_NAME', 1, start));
  const flagsAt = attr(t, U.IPVS_SVC_ATTR_FLAGS, 'IPVS_SVC_ATTR_FLAGS', 8, start)[0];
  const flags = payload.readUInt32LE(flagsAt);
  const timeoutS = payload.readUInt32LE(attr(t, U.IPVS_SVC_ATTR_TIMEOUT, 'IPVS_SVC_ATTR_TIMEOUT', 4, start)[0]);

  const service: IpvsVirtualServer = {
    family: fam,
    protocol: 0,
    scheduler,
    flags: U.serviceFlagNames(flags, scheduler),
    timeoutS,
    realServers: [],
  };
  const selector: ServiceSelector = { af };

  const fwmarkAt = optional(t, U.IPVS_SVC_ATTR_FWMARK, 'IPVS_SVC_ATTR_FWMARK', 4)?.[0];
  if (fwmarkAt !== undefined) {
    service.fwmark = selector.fwmark = payload.readUInt32LE(fwmarkAt);
  } else {
    const protocol = payload.readUInt16LE(attr(t, U.IPVS_SVC_ATTR_PROTOCOL, 'IPVS_SVC_ATTR_PROTOCOL', 2, start)[0]);
    const [addrAt, addrEnd] = attr(t, U.IPVS_SVC_ATTR_ADDR, 'IPVS_SVC_ATTR_ADDR', fam === 4 ? 4 : 16, start);
    const port = payload.readUInt16BE(attr(t, U.IPVS_SVC_ATTR_PORT, 'IPVS_SVC_ATTR_PORT', 2, start)[0]);
    service.protocol = protocolOfNumber(protocol) ?? protocol;
    service.address = formatIP(payload, addrAt, fam === 4 ? 4 : 16);
    service.port = port;
    const addr = Buffer.alloc(16);
    payload.copy(addr, 0, addrAt, Math.min(addrAt + 16, addrEnd));
    Object.assign(selector, { protocol, addr, port });
  }

  const maskAt = optional(t, U.IPVS_SVC_ATTR_NETMASK, 'IPVS_SVC_ATTR_NETMASK', 4)?.[0];
  if (maskAt !== undefined) {
    // IPv4: a mask in network order; IPv6: a prefix length in host order (the kernel compares it with 128).
    service.netmask = fam === 4 ? formatIPv4(payload, maskAt) : String(payload.readUInt32LE(maskAt));
  }
  const pe = t.get(U.IPVS_SVC_ATTR_PE_NAME);
  if (pe) service.peName = readCString(payload, ...pe);
  const st = stats(payload, t, U.IPVS_SVC_ATTR_STATS64, U.IPVS_SVC_ATTR_STATS);
  if (st) service.stats = st;
  return { service, selector };
}

/** One IPVS_CMD_NEW_DEST dump message → real server; serviceFamily applies when the kernel omits the dest's own. */
export function decodeDest(payload: Buffer, serviceFamily: Family): IpvsRealServer {
  const { t, start } = nested(payload, U.IPVS_CMD_ATTR_DEST, 'IPVS_CMD_ATTR_DEST');
  const u32 = (type: number, name: string): number => payload.readUInt32LE(attr(t, type, name, 4, start)[0]);
  const afAt = optional(t, U.IPVS_DEST_ATTR_ADDR_FAMILY, 'IPVS_DEST_ATTR_ADDR_FAMILY', 2)?.[0];
  const fam =
    afAt === undefined ? serviceFamily : family(payload.readUInt16LE(afAt), 'IPVS_DEST_ATTR_ADDR_FAMILY', afAt);
  const addrAt = attr(t, U.IPVS_DEST_ATTR_ADDR, 'IPVS_DEST_ATTR_ADDR', fam === 4 ? 4 : 16, start)[0];
  const rs: IpvsRealServer = {
    address: formatIP(payload, addrAt, fam === 4 ? 4 : 16),
    port: payload.readUInt16BE(attr(t, U.IPVS_DEST_ATTR_PORT, 'IPVS_DEST_ATTR_PORT', 2, start)[0]),
    weight: payload.readInt32LE(attr(t, U.IPVS_DEST_ATTR_WEIGHT, 'IPVS_DEST_ATTR_WEIGHT', 4, start)[0]),
    forward: nameOf(
      U.FORWARDS,
      u32(U.IPVS_DEST_ATTR_FWD_METHOD, 'IPVS_DEST_ATTR_FWD_METHOD') & U.IP_VS_CONN_F_FWD_MASK,
    ),
    activeConns: u32(U.IPVS_DEST_ATTR_ACTIVE_CONNS, 'IPVS_DEST_ATTR_ACTIVE_CONNS'),
    inactiveConns: u32(U.IPVS_DEST_ATTR_INACT_CONNS, 'IPVS_DEST_ATTR_INACT_CONNS'),
    persistentConns: u32(U.IPVS_DEST_ATTR_PERSIST_CONNS, 'IPVS_DEST_ATTR_PERSIST_CONNS'),
    upperThreshold: u32(U.IPVS_DEST_ATTR_U_THRESH, 'IPVS_DEST_ATTR_U_THRESH'),
    lowerThreshold: u32(U.IPVS_DEST_ATTR_L_THRESH, 'IPVS_DEST_ATTR_L_THRESH'),
  };
  if (fam !== serviceFamily) rs.family = fam;
  if (rs.forward === 'tunnel') {
    // Tunnel attributes arrived in 5.2/5.3; older kernels only do IPIP.
    const typeAt = optional(t, U.IPVS_DEST_ATTR_TUN_TYPE, 'IPVS_DEST_ATTR_TUN_TYPE', 1)?.[0];
    const portAt = optional(t, U.IPVS_DEST_ATTR_TUN_PORT, 'IPVS_DEST_ATTR_TUN_PORT', 2)?.[0];
    const flagsAt = optional(t, U.IPVS_DEST_ATTR_TUN_FLAGS, 'IPVS_DEST_ATTR_TUN_FLAGS', 2)?.[0];
    rs.tunnel = {
      type: nameOf(U.TUNNEL_TYPES, typeAt === undefined ? 0 : payload[typeAt]!),
      port: portAt === undefined ? 0 : payload.readUInt16BE(portAt),
      checksum: nameOf(U.TUNNEL_CHECKSUMS, flagsAt === undefined ? 0 : payload.readUInt16LE(flagsAt)),
    };
  }
  const st = stats(payload, t, U.IPVS_DEST_ATTR_STATS64, U.IPVS_DEST_ATTR_STATS);
  if (st) rs.stats = st;
  return rs;
}

/** GET_SERVICE dump request. */
export function serviceDumpRequest(familyId: number): Buffer {
  return genlMessage(familyId, NLM_F_REQUEST | NLM_F_DUMP, U.IPVS_CMD_GET_SERVICE, U.IPVS_GENL_VERSION).finish();
}

/** GET_DEST dump request for one service, identified as the kernel parses it (AF + fwmark or protocol/addr/port). */
export function destDumpRequest(familyId: number, sel: ServiceSelector): Buffer {
  const w: MessageWriter = genlMessage(familyId, NLM_F_REQUEST | NLM_F_DUMP, U.IPVS_CMD_GET_DEST, U.IPVS_GENL_VERSION)
    .beginNested(U.IPVS_CMD_ATTR_SERVICE)
    .attrU16(U.IPVS_SVC_ATTR_AF, sel.af);
  if (sel.fwmark !== undefined) {
    w.attrU32(U.IPVS_SVC_ATTR_FWMARK, sel.fwmark);
  } else {
    w.attrU16(U.IPVS_SVC_ATTR_PROTOCOL, sel.protocol ?? 0)
      .attr(U.IPVS_SVC_ATTR_ADDR, sel.addr ?? Buffer.alloc(16))
      .attrU16be(U.IPVS_SVC_ATTR_PORT, sel.port ?? 0);
  }
  return w.endNested().finish();
}
