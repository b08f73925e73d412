// Which packets are ours and of which kind: the one definition over packetTargets, used directly by the pcap
// fallback; clbprobe.bpf.c decides the same from maps of the same targets, checked by the lab tests.
import { LOCAL_BOUND, LOCAL_POD } from './bpf-layout.js';
import {
  address16,
  type CounterKind,
  type Direction,
  isV4Mapped,
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

const DLT_EN10MB = 1;
const DLT_RAW = 12;
const DLT_LINUX_SLL = 113;

/** Bytes before the network header for a pcap link type; undefined = unsupported. */
export function linkHeaderLength(dlt: number): number | undefined {
  if (dlt === DLT_EN10MB) return 14;
  if (dlt === DLT_RAW) return 0;
  if (dlt === DLT_LINUX_SLL) return 16;
  return undefined;
}

const IPPROTO_HOPOPTS = 0;
const IPPROTO_ROUTING = 43;
const IPPROTO_FRAGMENT = 44;
const IPPROTO_DSTOPTS = 60;
const PORT_PROTOS = new Set([6, 17, 132]);

function mapped(b: Uint8Array, off: number): Buffer {
  const out = Buffer.alloc(16);
  out[10] = 0xff;
  out[11] = 0xff;
  out.set(b.subarray(off, off + 4), 12);
  return out;
}

/** Parses one frame's IP and port headers; undefined for what the program ignores too (non-IP, fragments, cut). */
export function parseHeaders(data: Uint8Array, off: number, caplen: number, l2: number): PacketHeaders | undefined {
  const end = off + caplen;
  let p = off + l2;
  let ethertype: number;
  if (l2 === 14) {
    ethertype = (data[off + 12]! << 8) | data[off + 13]!;
    // In-band VLAN tags (the kernel hands them to pcap re-inserted).
    while ((ethertype === 0x8100 || ethertype === 0x88a8) && p + 4 <= end) {
      ethertype = (data[p + 2]! << 8) | data[p + 3]!;
      p += 4;
    }
  } else if (l2 === 16) {
    ethertype = (data[off + 14]! << 8) | data[off + 15]!;
  } else {
    ethertype = data[p]! >> 4 === 6 ? 0x86dd : 0x0800;
  }
  let src: Buffer, dst: Buffer, proto: number, v4: boolean;
  if (ethertype === 0x0800) {
    if (p + 20 > end) return undefined;
    const fragOff = ((data[p + 6]! << 8) | data[p + 7]!) & 0x1fff;
    if (fragOff !== 0) return undefined;
    proto = data[p + 9]!;
    src = mapped(data, p + 12);
    dst = mapped(data, p + 16);
    v4 = true;
    p += (data[p]! & 0x0f) * 4;
  } else if (ethertype === 0x86dd) {
    if (p + 40 > end) return undefined;
    src = Buffer.from(data.subarray(p + 8, p + 24));
    dst = Buffer.from(data.subarray(p + 24, p + 40));
    v4 = false;
    proto = data[p + 6]!;
    p += 40;
    for (let i = 0; i < 3; i++) {
      if (proto === IPPROTO_HOPOPTS || proto === IPPROTO_ROUTING || proto === IPPROTO_DSTOPTS) {
        if (p + 2 > end) return undefined;
        proto = data[p]!;
        p += (data[p + 1]! + 1) * 8;
      } else if (proto === IPPROTO_FRAGMENT) {
        if (p + 4 > end) return undefined;
        if ((((data[p + 2]! << 8) | data[p + 3]!) & 0xfff8) !== 0) return undefined;
        proto = data[p]!;
        p += 8;
      } else break;
    }
  } else return undefined;
  if (!PORT_PROTOS.has(proto) || p + 4 > end) return undefined;
  return { src, dst, v4, proto, sport: (data[p]! << 8) | data[p + 1]!, dport: (data[p + 2]! << 8) | data[p + 3]! };
}

const vipKey = (addr: Buffer, port: number, proto: number): string => `${addr.toString('hex')}|${port}|${proto}`;

/** The targets in lookup form, addresses in their 16-byte form. */
export class TargetIndex {
  private readonly vips: Set<string>;
  private readonly nodePorts: Set<string>;
  /** Host addresses (hex) -> local flags. */
  private readonly hosts = new Map<string, number>();
  /** Wider prefixes, compared one by one (a node has a few pod CIDRs); an IPv4 one holds only IPv4 addresses. */
  private readonly nets: (Prefix16 & { flags: number; v4: boolean })[] = [];

  constructor(t: Targets) {
    this.vips = new Set(t.vips.map((v) => vipKey(address16(v.address), v.port, PROTO_NUMBERS[v.proto])));
    this.nodePorts = new Set(t.nodePorts.map((n) => `${PROTO_NUMBERS[n.proto]}|${n.port}`));
    for (const p of t.localPrefixes) {
      const prefix = parsePrefix16(p.cidr);
      const flags = p.bound ? LOCAL_BOUND : LOCAL_POD;
      if (prefix.bits < 128) this.nets.push({ ...prefix, flags, v4: !p.cidr.split('/')[0]!.includes(':') });
      else {
        const hex = prefix.address.toString('hex');
        this.hosts.set(hex, (this.hosts.get(hex) ?? 0) | flags);
      }
    }
  }

  /** Local flags of a 16-byte address (IPv4-mapped for IPv4): those of every local prefix that holds it. */
  localFlags(addr: Buffer): number {
    let flags = this.hosts.get(addr.toString('hex')) ?? 0;
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

function inPrefix(addr: Buffer, p: Prefix16): boolean {
  const whole = p.bits >> 3;
  if (addr.compare(p.address, 0, whole, 0, whole) !== 0) return false;
  const rest = p.bits & 7;
  return rest === 0 || ((addr[whole]! ^ p.address[whole]!) & (0xff00 >> rest) & 0xff) === 0;
}

const ANY_V4 = mapped(new Uint8Array(4), 0);
const ANY_V6 = Buffer.alloc(16);

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
