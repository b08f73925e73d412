// Which packets are ours and of which kind: the one definition over packetTargets, used directly by the pcap
// fallback; clbprobe.bpf.c decides the same from maps of the same targets, checked by the lab tests.
import { bytesText, LOCAL_BOUND, LOCAL_POD } from './bpf-layout.js';
import {
  ANY_V4,
  ANY_V6,
  address16,
  type CounterKind,
  type Direction,
  inPrefix,
  isV4Mapped,
  mapped4,
  PROTO_NUMBERS,
  type Prefix16,
  parsePrefix16,
  type Targets,
} from './targets.js';

export interface PacketHeaders {
  /** 16-byte addresses (IPv4-mapped for IPv4). */
  src: Buffer;
  dst: Buffer;
  v4: boolean;
  proto: number;
  sport: number;
  dport: number;
}

export interface Classified {
  /** 16-byte address of the counter's target. */
  target: Buffer;
  port: number;
  proto: number;
  kind: CounterKind;
  direction: Direction;
}

/** Bytes before the network header by pcap link type (DLT_EN10MB, DLT_RAW, DLT_LINUX_SLL); others unsupported. */
export const LINK_HEADER_LENGTHS = new Map([
  [1, 14],
  [12, 0],
  [113, 16],
]);

/** IPv6 hop-by-hop, routing and destination options headers, skipped to reach the ports. */
const IPV6_OPTION_HEADERS = new Set([0, 43, 60]);
const IPPROTO_FRAGMENT = 44;
const PORT_PROTOS = new Set([6, 17, 132]);

const u16 = (data: Uint8Array, at: number): number => (data[at]! << 8) | data[at + 1]!;

/** Parses one frame's IP and port headers; undefined for what the program ignores too (non-IP, fragments, cut). */
export function parseHeaders(data: Uint8Array, off: number, caplen: number, l2: number): PacketHeaders | undefined {
  const end = off + caplen;
  let p = off + l2;
  let ethertype: number;
  if (l2 === 14) {
    ethertype = u16(data, off + 12);
    // In-band VLAN tags (the kernel hands them to pcap re-inserted).
    while ((ethertype === 0x8100 || ethertype === 0x88a8) && p + 4 <= end) {
      ethertype = u16(data, p + 2);
      p += 4;
    }
  } else if (l2 === 16) {
    ethertype = u16(data, off + 14);
  } else {
    ethertype = data[p]! >> 4 === 6 ? 0x86dd : 0x0800;
  }
  let src: Buffer, dst: Buffer, proto: number;
  if (ethertype === 0x0800) {
    if (p + 20 > end || (u16(data, p + 6) & 0x1fff) !== 0) return undefined;
    proto = data[p + 9]!;
    src = mapped4(data, p + 12);
    dst = mapped4(data, p + 16);
    p += (data[p]! & 0x0f) * 4;
  } else if (ethertype === 0x86dd) {
    if (p + 40 > end) return undefined;
    src = Buffer.from(data.subarray(p + 8, p + 24));
    dst = Buffer.from(data.subarray(p + 24, p + 40));
    proto = data[p + 6]!;
    p += 40;
    for (let i = 0; i < 3; i++) {
      if (IPV6_OPTION_HEADERS.has(proto)) {
        if (p + 2 > end) return undefined;
        proto = data[p]!;
        p += (data[p + 1]! + 1) * 8;
      } else if (proto === IPPROTO_FRAGMENT) {
        if (p + 4 > end || (u16(data, p + 2) & 0xfff8) !== 0) return undefined;
        proto = data[p]!;
        p += 8;
      } else break;
    }
  } else return undefined;
  if (!PORT_PROTOS.has(proto) || p + 4 > end) return undefined;
  return { src, dst, v4: ethertype === 0x0800, proto, sport: u16(data, p), dport: u16(data, p + 2) };
}

const vipKey = (addr: Buffer, port: number, proto: number): string => `${addr.toString('hex')}|${port}|${proto}`;

/** A local prefix with its local_flag bits: LOCAL_BOUND for addresses bound on the node, LOCAL_POD for pod CIDRs. */
export type LocalPrefix = Prefix16 & { flags: number };

/** One family's local prefixes: host addresses (16-byte form as text) -> flags, and the wider prefixes, each once. */
export function localFamily(t: Targets, v4: boolean): { hosts: Map<string, number>; nets: LocalPrefix[] } {
  const hosts = new Map<string, number>();
  const nets = new Map<string, LocalPrefix>();
  for (const lp of t.localPrefixes) {
    const p = parsePrefix16(lp.cidr);
    if (p.v4 !== v4) continue;
    const flags = lp.bound ? LOCAL_BOUND : LOCAL_POD;
    const k = bytesText(p.address);
    if (p.bits === 128) hosts.set(k, (hosts.get(k) ?? 0) | flags);
    else nets.set(`${k}/${p.bits}`, { ...p, flags: flags | (nets.get(`${k}/${p.bits}`)?.flags ?? 0) });
  }
  return { hosts, nets: [...nets.values()] };
}

/** The targets in lookup form, addresses in their 16-byte form. */
export class TargetIndex {
  private readonly vips: Set<string>;
  private readonly nodePorts: Set<string>;
  /** Host addresses (bytesText) -> local flags. */
  private readonly hosts = new Map<string, number>();
  /** Wider prefixes, compared one by one (a node has a few pod CIDRs); an IPv4 one holds only IPv4 addresses. */
  private readonly nets: LocalPrefix[] = [];

  constructor(t: Targets) {
    this.vips = new Set(t.vips.map((v) => vipKey(address16(v.address), v.port, PROTO_NUMBERS[v.proto])));
    this.nodePorts = new Set(t.nodePorts.map((n) => `${PROTO_NUMBERS[n.proto]}|${n.port}`));
    for (const family of [localFamily(t, true), localFamily(t, false)]) {
      for (const [k, flags] of family.hosts) this.hosts.set(k, (this.hosts.get(k) ?? 0) | flags);
      this.nets.push(...family.nets);
    }
  }

  /** Local flags of a 16-byte address (IPv4-mapped for IPv4): those of every local prefix that holds it. */
  localFlags(addr: Buffer): number {
    let flags = this.hosts.get(addr.toString('latin1')) ?? 0;
    const v4 = isV4Mapped(addr);
    for (const n of this.nets) if (n.v4 === v4 && inPrefix(addr, n)) flags |= n.flags;
    return flags;
  }

  hasVip(addr: Buffer, port: number, proto: number): boolean {
    return this.vips.has(vipKey(addr, port, proto));
  }

  hasNodePort(port: number, proto: number): boolean {
    return this.nodePorts.has(`${proto}|${port}`);
  }
}

/** The counters one packet bumps (clbp_ingress / clbp_egress decide the same). */
export function classify(h: PacketHeaders, direction: Direction, idx: TargetIndex): Classified[] {
  if (direction === 'egress') {
    let port = h.dport;
    if (!idx.hasVip(h.dst, port, h.proto)) {
      port = 0;
      if (!idx.hasVip(h.dst, 0, h.proto)) return [];
    }
    if (!idx.localFlags(h.src)) return [];
    return [{ target: h.dst, port, proto: h.proto, kind: 'to_lb', direction }];
  }
  const src = idx.localFlags(h.src);
  if (!src) return [];
  const out: Classified[] = [];
  if (src & LOCAL_BOUND) out.push({ target: h.src, port: h.dport, proto: h.proto, kind: 'hc_local_src', direction });
  if (idx.hasNodePort(h.dport, h.proto)) {
    out.push({ target: h.v4 ? ANY_V4 : ANY_V6, port: h.dport, proto: h.proto, kind: 'loop_return', direction });
  } else if (idx.localFlags(h.dst) & LOCAL_POD) {
    out.push({ target: h.dst, port: h.dport, proto: h.proto, kind: 'loop_return', direction });
  }
  return out;
}
