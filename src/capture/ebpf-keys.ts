// Identities of the VIP keys the agent writes into vips4/vips6/viptab, and of the counter keys
// slots are handed out for: the key's bytes as text, so that they serve as Map and Set keys.
import {
  addressWord,
  COUNTER_KEY_SIZE,
  counterKey,
  filterBit,
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
import { ANY_V4, ANY_V6, mapped4 } from './targets.js';

/** Bytes as text, one character a byte ('latin1' round-trips every byte), half the length of hex. */
export const bytesText = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.length).toString('latin1');
export const textBytes = (t: string): Buffer => Buffer.from(t, 'latin1');

/** A vips4/vips6 key: the vip4_key's or vip6_key's bytes as text. */
export type VipKey = string;

export function vipKeyOf(addr16: Uint8Array, v4: boolean, port: number, proto: number): VipKey {
  return bytesText(vipKey16(addr16, v4, port, proto));
}

/** A key's 16-byte address (IPv4-mapped for IPv4), family, port and protocol number. */
export function vipParts(k: VipKey): { addr16: Buffer; v4: boolean; port: number; proto: number } {
  const b = textBytes(k);
  if (b.length === VIP4_KEY_SIZE)
    return { addr16: mapped4(b), v4: true, port: b.readUInt16LE(VIP4_PORT), proto: b[VIP4_PROTO]! };
  if (b.length !== VIP6_KEY_SIZE) throw new Error(`not a VIP key: ${b.toString('hex')}`);
  return { addr16: b.subarray(0, 16), v4: false, port: b.readUInt16LE(VIP6_PORT), proto: b[VIP6_PROTO]! };
}

export const isVip4 = (k: VipKey): boolean => k.length === VIP4_KEY_SIZE;

/** The key's address word (addressWord), port and protocol number, as the filters hash them. */
function vipHashParts(k: VipKey): [word: number, port: number, proto: number] {
  const { addr16, v4, port, proto } = vipParts(k);
  return [addressWord(addr16, v4), port, proto];
}

/** The program's vip_bucket_of() of the key (filterBit: its viptab bucket). */
export const vipFilterBit = (k: VipKey): number => filterBit(...vipHashParts(k));

/** Sets the key's bits in a filters value (setVipBits: its address's and its own). */
export const setVipKeyBits = (filters: Buffer, k: VipKey): void => setVipBits(filters, ...vipHashParts(k));

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

/** The counter id a VIP entry's slot counts: to_lb, egress, the VIP's address, port and protocol. */
export function vipCounterId(k: VipKey): CounterId {
  const { addr16, port, proto } = vipParts(k);
  return counterIdOf(counterKey(addr16, port, proto, 'to_lb', 'egress'));
}

/** The counter id a NodePort's slot counts per family: loop_return, ingress, the any address. */
export function nodePortCounterId(port: number, proto: number, v6: boolean): CounterId {
  return counterIdOf(counterKey(v6 ? ANY_V6 : ANY_V4, port, proto, 'loop_return', 'ingress'));
}
