// Byte layouts of the eBPF program's map keys and values (native/bpf/clbprobe.bpf.c; host order for integers,
// network order for addresses), checked against the object's BTF by test/unit/capture/bpf-layout-btf.test.ts,
// and the keys' identities: their bytes as text, so that they serve as Map and Set keys.
import {
  ANY_V4,
  ANY_V6,
  address16,
  type CounterKind,
  type CounterSample,
  type Direction,
  formatAddress16,
  mapped4,
  PROTO_NAMES,
  PROTO_NUMBERS,
  type Proto,
} from './targets.js';

export const MAP_VIPS4 = 'vips4';
export const MAP_VIPS6 = 'vips6';
export const MAP_HOSTS4 = 'hosts4';
export const MAP_HOSTS6 = 'hosts6';
/** Global-variable sections: libbpf makes each a one-entry array map (key 0) the program addresses directly. */
export const MAP_CONFIG = '.data.config';
export const MAP_FILTERS = '.data.filters';
export const MAP_COUNTERS = 'counters';
export const MAP_STATS = 'stats';
export const MAP_SLOTS = 'slots';
export const MAP_SLOTS_SEEN = '.data.seen';
export const MAP_NODEPORTS = 'nodeports';
export const MAP_VIPTAB = 'viptab';
export const PROG_INGRESS = 'clbp_ingress';
export const PROG_EGRESS = 'clbp_egress';

/** struct vip4_key / vip6_key: address, port (host order), protocol. */
export const VIP4_KEY_SIZE = 8;
export const VIP4_PORT = 4;
export const VIP4_PROTO = 6;
export const VIP6_KEY_SIZE = 20;
export const VIP6_PORT = 16;
export const VIP6_PROTO = 18;
/** vips4/vips6 values: the entry's counter slot (u32), 0 = none. */
export const VIP_VALUE_SIZE = 4;
/** hosts4/hosts6: the address is the key, a u32 of local_flag bits the value. */
export const HOST4_KEY_SIZE = 4;
export const HOST6_KEY_SIZE = 16;
export const HOST_VALUE_SIZE = 4;
/** struct ctr_key: 16-byte address, port, protocol, kind, direction. */
export const COUNTER_KEY_SIZE = 24;
export const CTR_KEY_ADDR = 0;
export const CTR_KEY_PORT = 16;
export const CTR_KEY_PROTO = 18;
export const CTR_KEY_KIND = 19;
export const CTR_KEY_DIR = 20;
/** struct ctr_val: packets, bytes (u64 each, one per CPU). */
export const COUNTER_VALUE_SIZE = 16;
export const CTR_VAL_PACKETS = 0;
export const CTR_VAL_BYTES = 8;
/** The slots per-CPU array: one ctr_val per counter slot; slot 0 is never used. */
export const MAX_SLOTS = 16384;
/** max_entries of vips4 and vips6 (MAX_TARGETS in clbprobe.bpf.c): the LB VIP:ports counted per address family. */
export const MAX_VIPS_PER_FAMILY = 16384;
/** .data.seen: one array entry (key 0), struct slots_seen: a byte per slot, 1 once the slot was bumped. */
export const SLOTS_SEEN_VALUE_SIZE = MAX_SLOTS;
/** nodeports: struct nodeport_slots (u16 slot per family, 0 = none) at protocol slot * 65536 + port. */
export const NODEPORT_VALUE_SIZE = 4;
export const NODEPORT_SLOT_V4 = 0;
export const NODEPORT_SLOT_V6 = 2;
/** viptab: VIPTAB_BUCKETS cache-line buckets indexed by filterBit; `more` = 1 when a key is only in vips4/vips6. */
export const VIPTAB_BITS = 13;
export const VIPTAB_BUCKETS = 1 << VIPTAB_BITS;
export const VIP_BUCKET_SIZE = 64;
export const VIP_BUCKET_ENTRIES = 2;
export const VIP_BUCKET_MORE = 48;
export const VIP_ENT_SIZE = 24;
export const VIP_ENT_ADDR = 0;
export const VIP_ENT_TAG = 16;
export const VIP_ENT_SLOT = 20;

/** A struct vip_ent: the address as in the packet (IPv4: 4 bytes, then zeros), tag, slot. */
export function vipEntry(addr16: Uint8Array, v4: boolean, port: number, proto: number, slot: number): Buffer {
  const b = Buffer.alloc(VIP_ENT_SIZE);
  b.set(v4 ? addr16.subarray(12, 16) : addr16.subarray(0, 16), VIP_ENT_ADDR);
  b.writeUInt32LE((port | (proto << 16) | ((v4 ? 4 : 6) << 24)) >>> 0, VIP_ENT_TAG);
  b.writeUInt32LE(slot, VIP_ENT_SLOT);
  return b;
}

export const STAT_VALUE_SIZE = 8;

/** struct config: two counts, then MAX_NETS net4 (12 bytes) and MAX_NETS net6 (40 bytes). */
export const MAX_NETS = 16;
export const NET4_SIZE = 12;
export const NET4_ADDR = 0;
export const NET4_MASK = 4;
export const NET4_FLAGS = 8;
export const NET6_SIZE = 40;
export const NET6_ADDR = 0;
export const NET6_MASK = 16;
export const NET6_FLAGS = 32;
export const CONFIG_N4 = 0;
export const CONFIG_N6 = 4;
/** u32: 1 when hosts4 / hosts6 hold an address (the program skips the host filter otherwise). */
export const CONFIG_HOSTS4 = 8;
export const CONFIG_HOSTS6 = 12;
export const CONFIG_NETS4 = 16;
export const CONFIG_NETS6 = CONFIG_NETS4 + MAX_NETS * NET4_SIZE;
export const CONFIG_VALUE_SIZE = CONFIG_NETS6 + MAX_NETS * NET6_SIZE;

/** local_flag bits (hosts maps' values and the config's prefixes). */
export const LOCAL_BOUND = 1;
export const LOCAL_POD = 2;
/** Only in a config prefix's flags: the host hash holds this prefix's addresses, else the host filter is skipped. */
export const LOCAL_IN_HASH = 4;
export const STAT_COUNTERS_FULL = 0;

export const KIND_CODES: Record<CounterKind, number> = { to_lb: 1, loop_return: 2, hc_local_src: 3 };
const KINDS = new Map(Object.entries(KIND_CODES).map(([kind, code]) => [code, kind as CounterKind]));
/** struct ctr_key's dir codes, by position. */
const DIRECTIONS: readonly Direction[] = ['ingress', 'egress'];

/** The VIP key of a 16-byte address (IPv4-mapped for IPv4); proto is the IP protocol number. */
export function vipKey16(addr: Uint8Array, v4: boolean, port: number, proto: number): Buffer {
  const b = Buffer.alloc(v4 ? VIP4_KEY_SIZE : VIP6_KEY_SIZE);
  b.set(v4 ? addr.subarray(12, 16) : addr.subarray(0, 16), 0);
  b.writeUInt16LE(port, v4 ? VIP4_PORT : VIP6_PORT);
  b[v4 ? VIP4_PROTO : VIP6_PROTO] = proto;
  return b;
}

export function vipKey(address: string, port: number, proto: Proto): { v4: boolean; key: Buffer } {
  const a = address16(address);
  const v4 = !address.includes(':');
  return { v4, key: vipKey16(a, v4, port, PROTO_NUMBERS[proto]) };
}

/**
 * struct filters: VIP_LINES vip_lines (VADDR_* bits of hashed addresses, then 256 key bits at keyBit), the host
 * filter, then one exact NodePort bitmap per protocol.
 */
export const VIP_LINE_ADDR_BITS = 7;
export const VIP_LINE_ADDRS = 1 << VIP_LINE_ADDR_BITS;
export const VIP_LINES = 256;
export const VADDR_BITS = 8 + VIP_LINE_ADDR_BITS;
export const VIP_LINE_SIZE = 64;
export const VIP_LINE_ADDR = 0;
export const VIP_LINE_KEY = 32;
export const VADDR_BYTES = VIP_LINES * VIP_LINE_SIZE;
export const HOST_BITS = 16;
export const HOST_BYTES = (1 << HOST_BITS) / 8;
export const FILTERS_VIP = 0;
export const FILTERS_HOST = FILTERS_VIP + VADDR_BYTES;
export const FILTERS_NODEPORT = FILTERS_HOST + HOST_BYTES;
/** enum vip_addr_bit: some entry of the address has a port / is for any port (port 0). */
export const VADDR_PORT = 1;
export const VADDR_ANY = 2;
/** filters.nodeport: one exact bitmap of 65536 bits per protocol, in NODEPORT_PROTOS order. */
export const NODEPORT_BYTES = 65536 / 8;
export const NODEPORT_PROTOS = [PROTO_NUMBERS.tcp, PROTO_NUMBERS.udp, PROTO_NUMBERS.sctp];
export const NODEPORT_SLOTS = NODEPORT_PROTOS.length;
export const FILTERS_VALUE_SIZE = FILTERS_NODEPORT + NODEPORT_SLOTS * NODEPORT_BYTES;
const nodePortSlot = (proto: number): number => NODEPORT_PROTOS.indexOf(proto);
/** Byte offset in struct filters of the NodePort bitmap for a protocol number. */
export const nodePortBitmap = (proto: number): number => FILTERS_NODEPORT + nodePortSlot(proto) * NODEPORT_BYTES;
/** The nodeports array's index of a NodePort, and its number of entries. */
export const nodePortIndex = (proto: number, port: number): number => nodePortSlot(proto) * 65536 + port;
export const NODEPORT_ENTRIES = NODEPORT_SLOTS * 65536;

const HASH_MUL = 0x9e3779b1;
const PORT_MUL = 0x85ebca77;

/** The program's hash_bits(): the top `bits` bits of a multiplicative hash of the u32 x. */
export function hashBits(x: number, bits: number): number {
  x = (x ^ (x >>> 16)) >>> 0;
  return Math.imul(x, HASH_MUL) >>> (32 - bits);
}

/** The program's vip_bucket_of(): a VIP key's viptab bucket. w is the address's key word (addressWord). */
export function filterBit(w: number, port: number, proto: number): number {
  return hashBits((w ^ Math.imul((port << 8) | proto, PORT_MUL)) >>> 0, VIPTAB_BITS);
}

/** Sets a VIP key's address bit (VADDR_ANY for port 0, else VADDR_PORT) and its key bit in the same line. */
export function setVipBits(filters: Buffer, w: number, port: number, proto: number): void {
  const i = hashBits(w, VADDR_BITS);
  const line = FILTERS_VIP + (i >> VIP_LINE_ADDR_BITS) * VIP_LINE_SIZE;
  // Two bits per address: VADDR_PORT, then VADDR_ANY.
  setBit(filters, line + VIP_LINE_ADDR, (i & (VIP_LINE_ADDRS - 1)) * 2 + (port === 0 ? VADDR_ANY : VADDR_PORT) - 1);
  setBit(filters, line + VIP_LINE_KEY, keyBit(port, proto));
}

/** The program's key_bit_of(): a key's bit in its address's VIP filter line. */
export const keyBit = (port: number, proto: number): number => Math.imul((port << 8) | proto, PORT_MUL) >>> 24;

/** The host filter's bit of an address's key word (addressWord). */
export const hostBit = (w: number): number => hashBits(w, HOST_BITS);

/** The key word of a 16-byte address: an IPv4 address's 4 bytes, or an IPv6 one folded (fold6). */
export function addressWord(addr16: Uint8Array, v4: boolean): number {
  const b = Buffer.from(addr16.buffer, addr16.byteOffset, 16);
  if (v4) return b.readUInt32LE(12);
  return (b.readUInt32LE(0) ^ b.readUInt32LE(4) ^ b.readUInt32LE(8) ^ b.readUInt32LE(12)) >>> 0;
}

/** Sets bit `bit` of the bitmap at byte offset `at` (u64 words, little-endian: byte bit>>3, bit bit&7). */
export function setBit(b: Buffer, at: number, bit: number): void {
  b[at + (bit >> 3)]! |= 1 << (bit & 7);
}

export function u32Value(v: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v, 0);
  return b;
}

export interface Net4 {
  /** Masked address and mask, unsigned 32-bit in network order. */
  addr: number;
  mask: number;
  flags: number;
  /** The host hash holds addresses inside this prefix (written as LOCAL_IN_HASH). */
  inHash?: boolean;
}

export interface Net6 {
  /** Masked address and mask, 16 bytes each. */
  addr: Buffer;
  mask: Buffer;
  flags: number;
  inHash?: boolean;
}

/** hosts: whether hosts4 / hosts6 hold an address. */
export function configValue(nets4: Net4[], nets6: Net6[], hosts: { v4: boolean; v6: boolean }): Buffer {
  if (nets4.length > MAX_NETS || nets6.length > MAX_NETS) {
    throw new Error(`the eBPF program takes at most ${MAX_NETS} local prefixes per family (other than host addresses)`);
  }
  const b = Buffer.alloc(CONFIG_VALUE_SIZE);
  b.writeUInt32LE(nets4.length, CONFIG_N4);
  b.writeUInt32LE(nets6.length, CONFIG_N6);
  b.writeUInt32LE(hosts.v4 ? 1 : 0, CONFIG_HOSTS4);
  b.writeUInt32LE(hosts.v6 ? 1 : 0, CONFIG_HOSTS6);
  nets4.forEach((n, i) => {
    const at = CONFIG_NETS4 + i * NET4_SIZE;
    b.writeUInt32BE(n.addr, at + NET4_ADDR);
    b.writeUInt32BE(n.mask, at + NET4_MASK);
    b.writeUInt32LE(n.flags | (n.inHash ? LOCAL_IN_HASH : 0), at + NET4_FLAGS);
  });
  nets6.forEach((n, i) => {
    const at = CONFIG_NETS6 + i * NET6_SIZE;
    n.addr.copy(b, at + NET6_ADDR);
    n.mask.copy(b, at + NET6_MASK);
    b.writeUInt32LE(n.flags | (n.inHash ? LOCAL_IN_HASH : 0), at + NET6_FLAGS);
  });
  return b;
}

/** A struct ctr_key, as the program fills it (addr16: IPv4-mapped for IPv4). */
export function counterKey(
  addr16: Uint8Array,
  port: number,
  proto: number,
  kind: CounterKind,
  direction: Direction,
): Buffer {
  const b = Buffer.alloc(COUNTER_KEY_SIZE);
  b.set(addr16.subarray(0, 16), CTR_KEY_ADDR);
  b.writeUInt16LE(port, CTR_KEY_PORT);
  b[CTR_KEY_PROTO] = proto;
  b[CTR_KEY_KIND] = KIND_CODES[kind];
  b[CTR_KEY_DIR] = DIRECTIONS.indexOf(direction);
  return b;
}

/** Decodes the counter key at off; throws naming the offset on a value the program never writes. */
export function decodeCounterKey(b: Uint8Array, off: number): Omit<CounterSample, 'packets' | 'bytes'> {
  const view = Buffer.from(b.buffer, b.byteOffset + off, COUNTER_KEY_SIZE);
  const proto = PROTO_NAMES.get(view[CTR_KEY_PROTO]!);
  const kind = KINDS.get(view[CTR_KEY_KIND]!);
  const direction = DIRECTIONS[view[CTR_KEY_DIR]!];
  if (!proto || !kind || !direction) {
    throw new Error(`counters map: unexpected key at byte ${off}: ${view.toString('hex')}`);
  }
  return {
    target: formatAddress16(view, CTR_KEY_ADDR),
    port: view.readUInt16LE(CTR_KEY_PORT),
    proto,
    kind,
    direction,
  };
}

/** Bytes as text, one character a byte ('latin1' round-trips every byte), half the length of hex. */
export const bytesText = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.length).toString('latin1');
export const textBytes = (t: string): Buffer => Buffer.from(t, 'latin1');

/** A vips4/vips6 key: the vip4_key's or vip6_key's bytes as text. */
export type VipKey = string;

/** A key's 16-byte address (IPv4-mapped for IPv4), family, port and protocol number. */
export function vipParts(k: VipKey): { addr16: Buffer; v4: boolean; port: number; proto: number } {
  const b = textBytes(k);
  if (b.length === VIP4_KEY_SIZE)
    return { addr16: mapped4(b), v4: true, port: b.readUInt16LE(VIP4_PORT), proto: b[VIP4_PROTO]! };
  if (b.length !== VIP6_KEY_SIZE) throw new Error(`not a VIP key: ${b.toString('hex')}`);
  return { addr16: b.subarray(0, 16), v4: false, port: b.readUInt16LE(VIP6_PORT), proto: b[VIP6_PROTO]! };
}

export const isVip4 = (k: VipKey): boolean => k.length === VIP4_KEY_SIZE;

/** A VIP target as the maps need it, derived once per sync: its key, its viptab bucket, the counter of its slot. */
export interface Vip {
  key: VipKey;
  /** The program's vip_bucket_of() (filterBit). */
  bucket: number;
  /** to_lb, egress, the VIP's address, port and protocol. */
  counterId: CounterId;
}

/** The Vip of a 16-byte address (IPv4-mapped for IPv4); proto is the IP protocol number. */
export function vipOf(addr16: Uint8Array, v4: boolean, port: number, proto: number): Vip {
  return {
    key: bytesText(vipKey16(addr16, v4, port, proto)),
    bucket: filterBit(addressWord(addr16, v4), port, proto),
    counterId: counterIdOf(counterKey(addr16, port, proto, 'to_lb', 'egress')),
  };
}

/** The key's struct vip_ent with its counter slot. */
export function vipEntryOf(k: VipKey, slot: number): Buffer {
  const { addr16, v4, port, proto } = vipParts(k);
  return vipEntry(addr16, v4, port, proto, slot);
}

/** A struct ctr_key's bytes as text. */
export type CounterId = string;

export function counterIdOf(key: Uint8Array): CounterId {
  if (key.length !== COUNTER_KEY_SIZE) throw new Error(`counter key of ${key.length} bytes, not ${COUNTER_KEY_SIZE}`);
  return bytesText(key);
}

/** The counter id a NodePort's slot counts per family: loop_return, ingress, the any address. */
export function nodePortCounterId(port: number, proto: number, v6: boolean): CounterId {
  return counterIdOf(counterKey(v6 ? ANY_V6 : ANY_V4, port, proto, 'loop_return', 'ingress'));
}
