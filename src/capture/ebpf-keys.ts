// Compact identities of the VIP keys the agent writes into vips4/vips6/viptab, and of the
// counter keys slots are handed out for: a number where the key fits a double exactly (IPv4,
// and the NodePorts' any-address keys), the key's bytes as text otherwise (IPv6), as
// model/address-key.ts does for the Service index. Kept for every VIP:port while the agent runs:
// as text they cost ~500 bytes a VIP:port at 5,000 Services (heap snapshot of bench/agent.ts).
import {
  addressWord,
  COUNTER_KEY_SIZE,
  CTR_KEY_ADDR,
  CTR_KEY_DIR,
  CTR_KEY_KIND,
  CTR_KEY_PORT,
  CTR_KEY_PROTO,
  counterKey,
  filterBit,
  KIND_CODES,
  setVipBits,
  VIP4_KEY_SIZE,
  VIP4_PORT,
  VIP4_PROTO,
  VIP6_KEY_SIZE,
  VIP6_PORT,
  VIP6_PROTO,
  vipEntry,
  vipKey16,
} from './bpf-layout.js';
import { isV4Mapped } from './targets.js';

/**
 * Bytes as text, one character a byte ('latin1' maps every byte to one character and back):
 * half the length of hex, and a one-byte value is one of V8's shared one-character strings.
 */
export const bytesText = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.length).toString('latin1');
export const textBytes = (t: string): Buffer => Buffer.from(t, 'latin1');

/** Protocols with a number form (the ones targets may hold), by IP protocol number. */
const PROTOS = [6, 17, 132];
const protoIndex = (proto: number): number => PROTOS.indexOf(proto);

const u32be = (b: Uint8Array, off: number): number =>
  ((b[off]! << 24) | (b[off + 1]! << 16) | (b[off + 2]! << 8) | b[off + 3]!) >>> 0;

function setU32be(b: Uint8Array, off: number, v: number): void {
  b[off] = v >>> 24;
  b[off + 1] = (v >>> 16) & 0xff;
  b[off + 2] = (v >>> 8) & 0xff;
  b[off + 3] = v & 0xff;
}

const isPort = (port: number): boolean => Number.isInteger(port) && port >= 0 && port <= 65535;

/**
 * A vips4/vips6 key: for IPv4 (address * 65536 + port) * 3 + protocol index (< 2^50), else the
 * vip6_key's (or an unusual vip4_key's) bytes as text.
 */
export type VipKey = number | string;

export interface VipParts {
  /** 16-byte address, IPv4-mapped for IPv4. */
  addr16: Buffer;
  v4: boolean;
  port: number;
  /** IP protocol number. */
  proto: number;
}

export function vipKeyOf(addr16: Uint8Array, v4: boolean, port: number, proto: number): VipKey {
  const p = protoIndex(proto);
  if (v4 && p >= 0 && isPort(port)) return (u32be(addr16, 12) * 65536 + port) * 3 + p;
  return bytesText(vipKey16(addr16, v4, port, proto));
}

export function vipParts(k: VipKey): VipParts {
  const addr16 = Buffer.alloc(16);
  if (typeof k === 'number') {
    const p = k % 3;
    const rest = (k - p) / 3;
    const port = rest % 65536;
    addr16[10] = addr16[11] = 0xff;
    setU32be(addr16, 12, (rest - port) / 65536);
    return { addr16, v4: true, port, proto: PROTOS[p]! };
  }
  const b = textBytes(k);
  if (b.length === VIP4_KEY_SIZE) {
    addr16[10] = addr16[11] = 0xff;
    b.copy(addr16, 12, 0, 4);
    return { addr16, v4: true, port: b.readUInt16LE(VIP4_PORT), proto: b[VIP4_PROTO]! };
  }
  if (b.length !== VIP6_KEY_SIZE) throw new Error(`not a VIP key: ${b.toString('hex')}`);
  b.copy(addr16, 0, 0, 16);
  return { addr16, v4: false, port: b.readUInt16LE(VIP6_PORT), proto: b[VIP6_PROTO]! };
}

/** The key's bytes in vips4 (IPv4) or vips6. */
export function vipKeyBytes(k: VipKey): Buffer {
  if (typeof k === 'string') return textBytes(k);
  const { addr16, port, proto } = vipParts(k);
  return vipKey16(addr16, true, port, proto);
}

export const isVip4 = (k: VipKey): boolean => typeof k === 'number' || k.length === VIP4_KEY_SIZE;

/** The key's address word (addressWord), port and protocol number, as the filters hash them. */
function vipHashParts(k: VipKey): [word: number, port: number, proto: number] {
  if (typeof k === 'number') {
    // vipParts without its Buffer: this runs for every VIP at every sync.
    const p = k % 3;
    const rest = (k - p) / 3;
    const port = rest % 65536;
    const a = (rest - port) / 65536;
    // addressWord of IPv4: the address's bytes as a little-endian word.
    const word = ((a >>> 24) | ((a >>> 8) & 0xff00) | ((a & 0xff00) << 8) | ((a & 0xff) << 24)) >>> 0;
    return [word, port, PROTOS[p]!];
  }
  const { addr16, v4, port, proto } = vipParts(k);
  return [addressWord(addr16, v4), port, proto];
}

/** The program's vip_bucket_of() of the key (filterBit: its viptab bucket). */
export function vipFilterBit(k: VipKey): number {
  return filterBit(...vipHashParts(k));
}

/** Sets the key's bits in a filters value (setVipBits: its address's and its own). */
export function setVipKeyBits(filters: Buffer, k: VipKey): void {
  setVipBits(filters, ...vipHashParts(k));
}

/** The key's struct vip_ent with its counter slot. */
export function vipEntryOf(k: VipKey, slot: number): Buffer {
  const { addr16, v4, port, proto } = vipParts(k);
  return vipEntry(addr16, v4, port, proto, slot);
}

/**
 * A struct ctr_key: for an IPv4-mapped address ((address * 65536 + port) * 3 + protocol index)
 * * 6 + kind-direction (< 2^53); for the all-zero IPv6 address (the NodePorts' IPv6 key)
 * -1 - that with address 0; else the key's bytes as text.
 */
export type CounterId = number | string;

const KIND_DIRS = 6;
const kindDir = (kindCode: number, dir: number): number => (kindCode - 1) * 2 + dir;
const TO_LB_EGRESS = kindDir(KIND_CODES.to_lb, 1);
const LOOP_RETURN_INGRESS = kindDir(KIND_CODES.loop_return, 0);

export function counterIdOf(key: Uint8Array): CounterId {
  if (key.length !== COUNTER_KEY_SIZE) throw new Error(`counter key of ${key.length} bytes, not ${COUNTER_KEY_SIZE}`);
  const b = Buffer.from(key.buffer, key.byteOffset, COUNTER_KEY_SIZE);
  const p = protoIndex(b[CTR_KEY_PROTO]!);
  const kind = b[CTR_KEY_KIND]!;
  const dir = b[CTR_KEY_DIR]!;
  let padZero = true;
  for (let i = CTR_KEY_DIR + 1; i < COUNTER_KEY_SIZE; i++) padZero &&= b[i] === 0;
  if (p >= 0 && kind >= 1 && kind <= 3 && dir <= 1 && padZero) {
    const tail = (b.readUInt16LE(CTR_KEY_PORT) * 3 + p) * KIND_DIRS + kindDir(kind, dir);
    if (isV4Mapped(b, CTR_KEY_ADDR)) return u32be(b, CTR_KEY_ADDR + 12) * (65536 * 3 * KIND_DIRS) + tail;
    if (b.subarray(CTR_KEY_ADDR, CTR_KEY_ADDR + 16).every((x) => x === 0)) return -1 - tail;
  }
  return bytesText(b);
}

/** The struct ctr_key of an id. */
export function counterKeyOf(id: CounterId): Buffer {
  if (typeof id === 'string') return textBytes(id);
  const out = Buffer.alloc(COUNTER_KEY_SIZE);
  const n = id < 0 ? -1 - id : id;
  const kd = n % KIND_DIRS;
  const rest = (n - kd) / KIND_DIRS;
  const p = rest % 3;
  const addrPort = (rest - p) / 3;
  const port = addrPort % 65536;
  if (id >= 0) {
    out[CTR_KEY_ADDR + 10] = out[CTR_KEY_ADDR + 11] = 0xff;
    setU32be(out, CTR_KEY_ADDR + 12, (addrPort - port) / 65536);
  }
  out.writeUInt16LE(port, CTR_KEY_PORT);
  out[CTR_KEY_PROTO] = PROTOS[p]!;
  out[CTR_KEY_KIND] = (kd >> 1) + 1;
  out[CTR_KEY_DIR] = kd & 1;
  return out;
}

/** The counter id a VIP entry's slot counts: to_lb, egress, the VIP's address, port and protocol. */
export function vipCounterId(k: VipKey): CounterId {
  if (typeof k === 'number') return k * KIND_DIRS + TO_LB_EGRESS;
  const { addr16, port, proto } = vipParts(k);
  return counterIdOf(counterKey(addr16, port, proto, 'to_lb', 'egress'));
}

const ANY_V4 = Buffer.from('00000000000000000000ffff00000000', 'hex');
const ANY_V6 = Buffer.alloc(16);

/** The counter id a NodePort's slot counts per family: loop_return, ingress, the any address. */
export function nodePortCounterId(port: number, proto: number, v6: boolean): CounterId {
  const p = protoIndex(proto);
  if (p < 0 || !isPort(port))
    return counterIdOf(counterKey(v6 ? ANY_V6 : ANY_V4, port, proto, 'loop_return', 'ingress'));
  const tail = (port * 3 + p) * KIND_DIRS + LOOP_RETURN_INGRESS;
  return v6 ? -1 - tail : tail;
}
