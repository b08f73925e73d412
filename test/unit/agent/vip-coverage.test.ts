// Full conntrack reads for VIPs new to the index: a new VIP is read for within about a second,
// but DNS answers that keep changing (a rotating pool, a name server answering a new address
// each time) cost a few reads an hour, not one every 30 s (a full read of 1M entries is seconds
// of CPU).
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { NewVipReads } from '../../../src/agent/vip-coverage.js';

const TEN_MIN = 600_000;
const vip = (address: string) => ({ address, protoNum: 6, port: 443 });

/** The agent's use: every index change calls changed(); a read starts with the index's VIPs of that moment. */
function agentLike() {
  let current: ReturnType<typeof vip>[] = [];
  const readsAt: number[] = [];
  const reads: NewVipReads = new NewVipReads({
    maxGapMs: TEN_MIN,
    read: () => {
      readsAt.push(Date.now());
      reads.readFor(current);
    },
  });
  reads.readFor(current);
  return {
    readsAt,
    answer(addresses: string[]) {
      current = addresses.map(vip);
      reads.changed(current);
    },
    stop: () => reads.stop(),
  };
}

describe('reads for new VIPs', () => {
  beforeEach(() => {
    vi.useFakeTimers();
    vi.setSystemTime(1_800_000_000_000);
  });
  afterEach(() => vi.useRealTimers());

  it('reads for a new VIP within about a second, and not again for the same VIP', () => {
    const a = agentLike();
    const t0 = Date.now();
    a.answer(['192.0.2.1']);
    vi.advanceTimersByTime(999);
    expect(a.readsAt).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(a.readsAt).toEqual([t0 + 1000]);
    for (let i = 0; i < 100; i++) {
      a.answer(['192.0.2.1']);
      vi.advanceTimersByTime(5000);
    }
    expect(a.readsAt).toHaveLength(1);
    a.stop();
  });

  it('a rotating DNS answer costs a few reads an hour, each gap at least double the last, at most the resync interval', () => {
    const a = agentLike();
    const pool = Array.from({ length: 8 }, (_, i) => `192.0.2.${i + 1}`);
    // TTL 5 s; each answer is two addresses of the pool, rotating.
    for (let t = 0; t < 3_600_000; t += 5000) {
      const i = (t / 5000) % pool.length;
      a.answer([pool[i]!, pool[(i + 1) % pool.length]!]);
      vi.advanceTimersByTime(5000);
    }
    expect(a.readsAt.length).toBeGreaterThanOrEqual(2);
    expect(a.readsAt.length).toBeLessThanOrEqual(12);
    const gaps = a.readsAt.slice(1).map((t, i) => t - a.readsAt[i]!);
    expect(gaps[0]).toBeGreaterThanOrEqual(30_000);
    for (const g of gaps) expect(g).toBeLessThanOrEqual(TEN_MIN + 5000);
    a.stop();
  });

  it('a name server answering a new address every 5 s costs at most one read per resync interval once it keeps on', () => {
    const a = agentLike();
    for (let t = 0; t < 3_600_000; t += 5000) {
      a.answer([`198.51.100.${(t / 5000) % 250}`, `203.0.113.${Math.floor(t / 5000 / 250)}`]);
      vi.advanceTimersByTime(5000);
    }
    // 1 s, +30 s, +60 s, +120 s, +240 s, +480 s, then every 10 min: 11 in the hour (one every 30 s would be 120).
    expect(a.readsAt.length).toBeLessThanOrEqual(12);
    const lastHalf = a.readsAt.filter((t) => t - a.readsAt[0]! >= 1_800_000);
    expect(lastHalf.length).toBeLessThanOrEqual(4);
    a.stop();
  });

  it('after a quiet spell as long as the resync interval, a new VIP is read for within a second again', () => {
    const a = agentLike();
    for (let t = 0; t < 600_000; t += 5000) {
      a.answer([`198.51.100.${(t / 5000) % 250}`]);
      vi.advanceTimersByTime(5000);
    }
    const before = a.readsAt.length;
    a.answer(['198.51.100.7']);
    vi.advanceTimersByTime(2 * TEN_MIN);
    const quietEnd = Date.now();
    a.answer(['192.0.2.200']);
    vi.advanceTimersByTime(1000);
    expect(a.readsAt.at(-1)).toBe(quietEnd + 1000);
    expect(a.readsAt.length).toBeGreaterThan(before);
    a.stop();
  });
});
