// What the counters look for (derived from model/ours.ts) and the counter samples they give back.
import { formatIP, parseIP } from '../kernel/ip.js';
import type { Ours } from '../model/ours.js';
import { LOWER_PROTOCOL_NUMBERS, type LowerProtocol } from '../model/protocol.js';

export type Proto = LowerProtocol;
export type CounterKind = 'to_lb' | 'loop_return' | 'hc_local_src';
export type Direction = 'ingress' | 'egress';
export type CounterBackend = 'ebpf' | 'pcap';
/** What `--capture` asks for: a backend, the best one that loads, or none. */
export type CaptureMode = CounterBackend | 'auto' | 'off';

export const PROTO_NUMBERS: Record<Proto, number> = LOWER_PROTOCOL_NUMBERS;
export const PROTO_NAMES = new Map(Object.entries(PROTO_NUMBERS).map(([name, n]) => [n, name as Proto]));

export interface Targets {
  /** port 0 = any port. */
  vips: { address: string; port: number; proto: Proto }[];
  /** cidr: a prefix or a bare address (a host); bound: bound on this node (node IP, kube-ipvs0), not a pod CIDR. */
  localPrefixes: { cidr: string; bound: boolean }[];
  nodePorts: { port: number; proto: Proto }[];
}

/**
 * One counter: target is the VIP (to_lb), local pod address or NodePort wildcard '0.0.0.0' / '::' (loop_return),
 * or bound source (hc_local_src); port is the VIP entry's port (0 = any) for to_lb, else the destination port.
 */
export interface CounterSample {
  target: string;
  port: number;
  proto: Proto;
  kind: CounterKind;
  direction: Direction;
  /** Wire packets (GSO segments on the eBPF path). */
  packets: number;
  bytes: number;
}

export interface CounterReading {
  backend: CounterBackend;
  /** Cumulative since the counter was opened. */
  counters: CounterSample[];
  /** Packets the classifier looked at (every packet on eBPF, filter matches on pcap). */
  seen: { ingress: number; egress: number };
  /** Losses, never silent: packets that could not be counted. */
  drops: {
    /** eBPF: a new counter key did not fit into the counters map. */
    counterMapFull: number;
    /** pcap: the capture buffer overflowed. */
    captureBuffer: number;
    /** pcap: dropped by the interface or driver. */
    interface: number;
  };
}

/** The counters' view of what is ours: each VIP:port and NodePort once, node addresses as bound prefixes. */
export function packetTargets(ours: Ours): Targets {
  const vips = new Map<string, Targets['vips'][number]>();
  for (const v of ours.vips) {
    const proto = PROTO_NAMES.get(v.protoNum);
    if (proto) vips.set(`${v.address}|${proto}|${v.port}`, { address: v.address, port: v.port, proto });
  }
  const nodePorts = new Map<string, Targets['nodePorts'][number]>();
  for (const n of ours.nodePorts) {
    const proto = PROTO_NAMES.get(n.protoNum);
    if (proto) nodePorts.set(`${proto}|${n.port}`, { port: n.port, proto });
  }
  const localPrefixes = [
    ...ours.podCidrs.map((cidr) => ({ cidr, bound: false })),
    ...ours.nodeIps.map((cidr) => ({ cidr, bound: true })),
  ];
  return { vips: [...vips.values()], localPrefixes, nodePorts: [...nodePorts.values()] };
}

export const DIRECTION_OF_KIND: Record<CounterKind, Direction> = {
  to_lb: 'egress',
  loop_return: 'ingress',
  hc_local_src: 'ingress',
};

const V4_MAPPED = Buffer.from('00000000000000000000ffff', 'hex');

/** The IPv4-mapped 16-byte form (::ffff:a.b.c.d) of the IPv4 address at `off`. */
export const mapped4 = (b: Uint8Array, off = 0): Buffer => Buffer.concat([V4_MAPPED, b.subarray(off, off + 4)]);

/** 16-byte form of an address; IPv4 as ::ffff:a.b.c.d. */
export function address16(address: string): Buffer {
  const b = parseIP(address);
  return b.length === 16 ? b : mapped4(b);
}

/** The any address of each family, as NodePort counters name it. */
export const ANY_V4 = mapped4(new Uint8Array(4));
export const ANY_V6 = Buffer.alloc(16);

export const isV4Mapped = (b: Uint8Array, off = 0): boolean => V4_MAPPED.equals(b.subarray(off, off + 12));

/** Text form of a 16-byte address (IPv4-mapped ones as plain IPv4). */
export function formatAddress16(b: Uint8Array, off = 0): string {
  return isV4Mapped(b, off) ? formatIP(b, off + 12, 4) : formatIP(b, off, 16);
}

/** A prefix over the 16-byte form (IPv4 /24 becomes 96 + 24 bits); v4: written as an IPv4 prefix. */
export interface Prefix16 {
  address: Buffer;
  bits: number;
  v4: boolean;
}

export function parsePrefix16(cidr: string): Prefix16 {
  const slash = cidr.indexOf('/');
  const text = slash < 0 ? cidr : cidr.slice(0, slash);
  let raw: Buffer;
  try {
    raw = parseIP(text);
  } catch {
    throw new Error(`not a CIDR: ${JSON.stringify(cidr)}`);
  }
  const max = raw.length * 8;
  const bits = slash < 0 ? max : Number(cidr.slice(slash + 1));
  if (!Number.isInteger(bits) || bits < 0 || bits > max || (slash >= 0 && !/^\d+$/.test(cidr.slice(slash + 1)))) {
    throw new Error(`bad prefix length in ${JSON.stringify(cidr)}`);
  }
  const v4 = raw.length === 4;
  const total = v4 ? 96 + bits : bits;
  return { address: maskInPlace(address16(text), total), bits: total, v4 };
}

/** Clears the bits after the first `bits` of b, and returns b. */
export function maskInPlace(b: Buffer, bits: number): Buffer {
  for (let i = 0; i < 16; i++) b[i]! &= 0xff00 >> Math.max(0, Math.min(8, bits - i * 8));
  return b;
}

/** Whether the 16-byte address is inside the prefix. */
export function inPrefix(addr: Buffer, p: Omit<Prefix16, 'v4'>): boolean {
  const whole = p.bits >> 3;
  if (addr.compare(p.address, 0, whole, 0, whole) !== 0) return false;
  const rest = p.bits & 7;
  return rest === 0 || ((addr[whole]! ^ p.address[whole]!) & (0xff00 >> rest) & 0xff) === 0;
}

function checkPort(port: number, what: string, allowZero: boolean): void {
  if (!Number.isInteger(port) || port < (allowZero ? 0 : 1) || port > 65535) {
    throw new Error(`${what}: bad port ${port}`);
  }
}

function checkProto(proto: string, what: string): void {
  if (!(proto in PROTO_NUMBERS))
    throw new Error(`${what}: protocol must be tcp, udp or sctp, not ${JSON.stringify(proto)}`);
}

/** Throws a clear error for the first malformed entry. */
export function validateTargets(t: Targets): void {
  for (const v of t.vips) {
    const what = `VIP ${v.address}:${v.port}/${v.proto}`;
    checkProto(v.proto, what);
    checkPort(v.port, what, true);
    address16(v.address);
  }
  for (const p of t.localPrefixes) parsePrefix16(p.cidr);
  for (const n of t.nodePorts) {
    checkProto(n.proto, `NodePort ${n.port}`);
    checkPort(n.port, `NodePort ${n.port}/${n.proto}`, false);
  }
}

/** The first `maxPerFamily` VIP:ports per family in the index's stable order, and those left out (still counted). */
export function withinVipCapacity(t: Targets, maxPerFamily: number): { targets: Targets; notCounted: number } {
  let v4 = 0;
  let v6 = 0;
  const vips = t.vips.filter((v) => (v.address.includes(':') ? ++v6 : ++v4) <= maxPerFamily);
  const notCounted = t.vips.length - vips.length;
  return { targets: notCounted ? { ...t, vips } : t, notCounted };
}
