// Byte layouts of the eBPF program's map keys and values
// (native/bpf/clbprobe.bpf.c; little-endian host order for the u16/u32/u64s).
import {
  address16,
  formatAddress16,
  PROTO_NUMBERS,
  type CounterKind,
  type Direction,
  type Prefix16,
  type Proto,
} from './targets.js';

export const MAP_VIPS = 'vips';
export const MAP_LOCALS = 'locals';
export const MAP_NODEPORTS = 'nodeports';
export const MAP_COUNTERS = 'counters';
export const MAP_STATS = 'stats';
export const PROG_INGRESS = 'clbp_ingress';
export const PROG_EGRESS = 'clbp_egress';

export const VIP_KEY_SIZE = 20;
export const LPM_KEY_SIZE = 20;
export const NODEPORT_KEY_SIZE = 4;
export const COUNTER_KEY_SIZE = 24;
export const COUNTER_VALUE_SIZE = 16;
/** Values of the locals trie. */
export const LOCAL_BOUND = 1;
export const LOCAL_POD = 2;
/** Slots of the stats per-CPU array. */
export const STAT_SEEN_INGRESS = 0;
export const STAT_SEEN_EGRESS = 1;
export const STAT_COUNTERS_FULL = 2;

const KIND_CODES: Record<CounterKind, number> = { to_lb: 1, loop_return: 2, hc_local_src: 3 };
const KINDS = Object.fromEntries(Object.entries(KIND_CODES).map(([k, v]) => [v, k])) as Record<number, CounterKind>;
const PROTOS = Object.fromEntries(Object.entries(PROTO_NUMBERS).map(([k, v]) => [v, k])) as Record<number, Proto>;

export function vipKey(address: string, port: number, proto: Proto): Buffer {
  const b = Buffer.alloc(VIP_KEY_SIZE);
  address16(address).copy(b, 0);
  b.writeUInt16LE(port, 16);
  b[18] = PROTO_NUMBERS[proto];
  return b;
}

export function lpmKey(p: Prefix16): Buffer {
  const b = Buffer.alloc(LPM_KEY_SIZE);
  b.writeUInt32LE(p.bits, 0);
  p.address.copy(b, 4);
  return b;
}

export function nodePortKey(port: number, proto: Proto): Buffer {
  const b = Buffer.alloc(NODEPORT_KEY_SIZE);
  b.writeUInt16LE(port, 0);
  b[2] = PROTO_NUMBERS[proto];
  return b;
}

export function u32Value(v: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v, 0);
  return b;
}

export interface DecodedCounterKey {
  target: string;
  port: number;
  proto: Proto;
  kind: CounterKind;
  direction: Direction;
}

/** Decodes the counter key at off; throws naming the offset on a value the program never writes. */
export function decodeCounterKey(b: Uint8Array, off: number): DecodedCounterKey {
  const view = Buffer.from(b.buffer, b.byteOffset + off, COUNTER_KEY_SIZE);
  const proto = PROTOS[view[18]!];
  const kind = KINDS[view[19]!];
  const dir = view[20];
  if (!proto || !kind || (dir !== 0 && dir !== 1)) {
    throw new Error(`counters map: unexpected key at byte ${off}: ${view.toString('hex')}`);
  }
  return {
    target: formatAddress16(view, 0),
    port: view.readUInt16LE(16),
    proto,
    kind,
    direction: dir === 0 ? 'ingress' : 'egress',
  };
}
