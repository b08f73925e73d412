// Contents of the eBPF program's maps: target sets -> map entries (kept in
// sync by diffing against what we wrote last), and counters <- per-CPU values.
import type { CaptureAddon } from './addon.js';
import {
  COUNTER_KEY_SIZE,
  COUNTER_VALUE_SIZE,
  decodeCounterKey,
  type DecodedCounterKey,
  LOCAL_BOUND,
  LOCAL_POD,
  lpmKey,
  nodePortKey,
  u32Value,
  vipKey,
} from './bpf-layout.js';
import { maskInPlace, parsePrefix16, type CounterSample, type Prefix16, type Targets } from './targets.js';

/**
 * key -> value, each as text (bytesText). Kept as text, not Buffers: at 5,000 Services the three
 * maps hold ~15k entries, and two Buffer objects per entry cost ~5 MB of heap (bench/agent.ts).
 */
export type MapContents = Map<string, string>;

/**
 * Bytes as text, one character a byte ('latin1' maps every byte to one character and back):
 * half the length of hex, and a one-byte value is one of V8's shared one-character strings
 * (at 5,000 Services, hex text was ~0.9 MB of the agent's heap).
 */
export const bytesText = (b: Buffer): string => b.toString('latin1');
export const textBytes = (t: string): Buffer => Buffer.from(t, 'latin1');

const PRESENT = Buffer.from([1]);

function put(m: MapContents, key: Buffer, value: Buffer): void {
  m.set(bytesText(key), bytesText(value));
}

function covers(outer: Prefix16, inner: Prefix16): boolean {
  if (outer.bits > inner.bits) return false;
  const masked = Buffer.from(inner.address);
  maskInPlace(masked, outer.bits);
  return masked.equals(outer.address);
}

/**
 * The trie returns only the longest match, so each prefix carries the flags of
 * every prefix that covers it (a node address inside a pod CIDR is both).
 */
export function localsContents(t: Targets): MapContents {
  const entries = t.localPrefixes.map((p) => ({ prefix: parsePrefix16(p.cidr), flags: p.bound ? LOCAL_BOUND : LOCAL_POD }));
  const wide = entries.filter((e) => e.prefix.bits < 128);
  const out: MapContents = new Map();
  const flagsByKey = new Map<string, { key: Buffer; flags: number }>();
  for (const e of entries) {
    let flags = e.flags;
    for (const w of wide) if (covers(w.prefix, e.prefix)) flags |= w.flags;
    const key = lpmKey(e.prefix);
    const text = bytesText(key);
    const prev = flagsByKey.get(text);
    flagsByKey.set(text, { key, flags: flags | (prev?.flags ?? 0) });
  }
  for (const { key, flags } of flagsByKey.values()) put(out, key, u32Value(flags));
  return out;
}

export function vipsContents(t: Targets): MapContents {
  const out: MapContents = new Map();
  for (const v of t.vips) put(out, vipKey(v.address, v.port, v.proto), PRESENT);
  return out;
}

export function nodePortsContents(t: Targets): MapContents {
  const out: MapContents = new Map();
  for (const n of t.nodePorts) put(out, nodePortKey(n.port, n.proto), PRESENT);
  return out;
}

/**
 * Makes the map hold `next`, given that it holds `current`: new and changed
 * entries first, then deletions, so that a key present in both never
 * disappears for a moment.
 */
export function syncMap(addon: CaptureAddon, fd: number, current: MapContents, next: MapContents): void {
  for (const [key, value] of next) {
    if (current.get(key) !== value) addon.bpfMapUpdate(fd, textBytes(key), textBytes(value), 0 /* BPF_ANY */);
  }
  for (const key of current.keys()) if (!next.has(key)) addon.bpfMapDelete(fd, textBytes(key));
}

/** Per-CPU values occupy one 8-byte-aligned slot per possible CPU. */
export function perCpuStride(valueSize: number): number {
  return Math.ceil(valueSize / 8) * 8;
}

/** Reads and sums the per-CPU counters map with batch lookups. */
export class CounterMapReader {
  private readonly keys: Buffer;
  private readonly values: Buffer;
  private readonly token = Buffer.alloc(8);
  private readonly status = new Int32Array(2);
  private readonly stride = perCpuStride(COUNTER_VALUE_SIZE);
  /** Decoded keys by raw bytes: keys stay the same from one read to the next. */
  private decoded = new Map<string, DecodedCounterKey>();

  constructor(
    private readonly addon: CaptureAddon,
    private readonly fd: number,
    private readonly cpus: number,
    private readonly batch = 4096,
  ) {
    this.keys = Buffer.alloc(batch * COUNTER_KEY_SIZE);
    this.values = Buffer.alloc(batch * cpus * this.stride);
  }

  read(): CounterSample[] {
    const out: CounterSample[] = [];
    const seen = new Map<string, DecodedCounterKey>();
    let first = true;
    for (;;) {
      this.addon.bpfMapLookupBatch(this.fd, this.keys, this.values, this.token, first, this.status, this.batch);
      first = false;
      const n = this.status[0]!;
      for (let i = 0; i < n; i++) {
        const raw = this.keys.toString('latin1', i * COUNTER_KEY_SIZE, (i + 1) * COUNTER_KEY_SIZE);
        const key = this.decoded.get(raw) ?? decodeCounterKey(this.keys, i * COUNTER_KEY_SIZE);
        seen.set(raw, key);
        out.push({
          target: key.target,
          port: key.port,
          proto: key.proto,
          kind: key.kind,
          direction: key.direction,
          packets: this.sum(i, 0),
          bytes: this.sum(i, 8),
        });
      }
      if (this.status[1] || n === 0) break;
    }
    this.decoded = seen;
    return out;
  }

  /** Sum over CPUs of the u64 at `field` of entry i (exact below 2^53). */
  private sum(i: number, field: number): number {
    let total = 0;
    const base = i * this.cpus * this.stride + field;
    for (let c = 0; c < this.cpus; c++) {
      const off = base + c * this.stride;
      total += this.values.readUInt32LE(off) + this.values.readUInt32LE(off + 4) * 0x1_0000_0000;
    }
    return total;
  }
}

/** Sum over CPUs of one slot of a per-CPU u64 array. */
export function readPerCpuU64(addon: CaptureAddon, fd: number, cpus: number, slot: number): number {
  const key = u32Value(slot);
  const value = Buffer.alloc(cpus * 8);
  if (!addon.bpfMapLookup(fd, key, value)) return 0;
  let sum = 0n;
  for (let c = 0; c < cpus; c++) sum += value.readBigUInt64LE(c * 8);
  return Number(sum);
}
