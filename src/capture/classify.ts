// The eBPF program's classification, in TypeScript, for packets captured with
// pcap (the fallback path). Same rules as native/bpf/clbprobe.bpf.c, built
// from the same map contents (ebpf-maps.ts), so both paths count alike.
import {
  LOCAL_BOUND,
  LOCAL_POD,
  MAP_FILTERS,
  MAP_VIPS4,
  MAP_VIPS6,
  nodePortBitmap,
  nodePortSlot,
  testBit,
  vipKey16,
} from './bpf-layout.js';
import { bytesText, type LocalSets, localSets, targetMaps, textBytes } from './ebpf-maps.js';
import { type CounterKind, type Direction, isV4Mapped, type Targets } from './targets.js';

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

/**
 * Parses the IP and port headers of one captured frame (data[off, off+caplen)).
 * Undefined for what the program ignores too: non-IP, no ports, non-first
 * fragments, or headers cut short by the snap length.
 */
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

/** Target sets in lookup form: the same entries the eBPF maps get, looked up as the program does. */
export class TargetIndex {
  private readonly vips4: Set<string>;
  private readonly vips6: Set<string>;
  /** The filters map's value (its NodePort bitmaps are exact). */
  private readonly filters: Buffer;
  private readonly local: LocalSets;

  constructor(t: Targets) {
    const maps = targetMaps(t);
    this.vips4 = new Set(maps[MAP_VIPS4]!.keys());
    this.vips6 = new Set(maps[MAP_VIPS6]!.keys());
    this.filters = textBytes([...maps[MAP_FILTERS]!.values()][0]!);
    this.local = localSets(t);
  }

  /** Local flags of a 16-byte address (IPv4-mapped for IPv4). */
  localFlags(addr: Buffer): number {
    if (isV4Mapped(addr)) {
      const a = addr.readUInt32BE(12);
      let flags = this.local.hosts4.get(bytesText(addr.subarray(12, 16))) ?? 0;
      for (const n of this.local.nets4) if ((a & n.mask) >>> 0 === n.addr) flags |= n.flags;
      return flags;
    }
    let flags = this.local.hosts6.get(bytesText(addr.subarray(0, 16))) ?? 0;
    for (const n of this.local.nets6) {
      let inside = true;
      for (let i = 0; i < 16 && inside; i++) inside = (addr[i]! & n.mask[i]!) === n.addr[i];
      if (inside) flags |= n.flags;
    }
    return flags;
  }

  hasVip(addr: Buffer, port: number, proto: number): boolean {
    const v4 = isV4Mapped(addr);
    return (v4 ? this.vips4 : this.vips6).has(bytesText(vipKey16(addr, v4, port, proto)));
  }

  hasNodePort(port: number, proto: number): boolean {
    return testBit(this.filters, nodePortBitmap(proto), port);
  }
}

const ANY_V4 = mapped(new Uint8Array(4), 0);
const ANY_V6 = Buffer.alloc(16);

/** The counters one packet bumps, exactly as clbp_ingress / clbp_egress decide. */
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
