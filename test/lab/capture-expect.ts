// Comparing counter readings with what a scenario sent.
import { expect } from 'vitest';
import type { Counter } from '../../src/capture/counter.js';
import { type CounterReading, type CounterSample, DIRECTION_OF_KIND } from '../../src/capture/targets.js';
import type { Expected } from './capture-lab.js';

const keyOf = (c: { target: string; port: number; proto: string; kind: string }) =>
  `${c.kind} ${c.target} ${c.port}/${c.proto}`;

/** Sums expectations that share a key (e.g. several scenario runs). */
export function merge(...lists: Expected[][]): Expected[] {
  const out = new Map<string, Expected>();
  for (const e of lists.flat()) {
    const prev = out.get(keyOf(e));
    if (!prev) out.set(keyOf(e), { ...e });
    else {
      prev.packets += e.packets;
      prev.bytes = prev.bytes === undefined || e.bytes === undefined ? undefined : prev.bytes + e.bytes;
    }
  }
  return [...out.values()];
}

/** Exactly these counters, no others; packets exact, bytes exact where known. */
export function expectCounters(r: CounterReading, want: Expected[]): void {
  const got = new Map<string, CounterSample>(r.counters.map((c) => [keyOf(c), c]));
  expect([...got.keys()].sort()).toEqual(want.map(keyOf).sort());
  for (const w of want) {
    const c = got.get(keyOf(w))!;
    expect({ key: keyOf(w), packets: c.packets, direction: c.direction }).toEqual({
      key: keyOf(w),
      packets: w.packets,
      direction: DIRECTION_OF_KIND[w.kind],
    });
    if (w.bytes !== undefined) expect({ key: keyOf(w), bytes: c.bytes }).toEqual({ key: keyOf(w), bytes: w.bytes });
    else expect(c.bytes).toBeGreaterThanOrEqual(w.packets * 54);
  }
}

/**
 * Reads until the counters match (the pcap path hands packets over in blocks,
 * up to its 100 ms timeout later), then once more after a pause, to catch any
 * late extra packet. Returns the last reading.
 */
export async function settledReading(counter: Counter, want: Expected[], timeoutMs = 3000): Promise<CounterReading> {
  const deadline = Date.now() + timeoutMs;
  const total = want.reduce((s, w) => s + w.packets, 0);
  for (;;) {
    const r = counter.read();
    const got = r.counters.reduce((s, c) => s + c.packets, 0);
    if (got >= total || Date.now() > deadline) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  await new Promise((res) => setTimeout(res, 250));
  return counter.read();
}
