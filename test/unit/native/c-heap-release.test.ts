// The C heap's free pages go back to the kernel (native/mem.c), and the agent does it after
// major GCs, at most once per interval (src/agent/c-heap-release.ts).
import { readFileSync } from 'node:fs';
import { constants, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { releaseCHeapAfterMajorGc } from '../../../src/agent/c-heap-release.js';
import { memAddon } from '../../../src/native/mem.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const rssAnonKiB = (): number => Number(/RssAnon:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))![1]);
const settle = () => new Promise((r) => setTimeout(r, 50));

describe('native trimCHeap', () => {
  it('gives back the free pages between live allocations', async () => {
    // 64 KiB blocks sit in malloc's heap (below its mmap threshold); a small block after each one
    // stays alive, so freeing the big ones leaves holes that a top-of-heap trim cannot give back.
    const big: Buffer[] = [];
    const pins: Buffer[] = [];
    for (let i = 0; i < 480; i++) {
      big.push(Buffer.allocUnsafeSlow(64 * 1024).fill(1));
      pins.push(Buffer.allocUnsafeSlow(256).fill(2));
    }
    big.length = 0;
    gc();
    await settle();
    gc();
    await settle();
    const before = rssAnonKiB();
    expect(memAddon().trimCHeap()).toBe(true);
    const after = rssAnonKiB();
    // 30 MiB were freed; most of it must leave the RSS (pages a pin shares stay).
    expect(before - after, `RssAnon ${before} -> ${after} KiB`).toBeGreaterThan(15 * 1024);
    expect(pins.length).toBe(480);
  });
});

describe('releaseCHeapAfterMajorGc', () => {
  it('trims after a major GC, at most once per interval, and not after stop', async () => {
    let t = 1_000_000;
    let trims = 0;
    const r = releaseCHeapAfterMajorGc({ trim: () => (trims++, true), minIntervalMs: 10_000, now: () => t });
    try {
      gc();
      await settle();
      expect(trims).toBe(1);
      gc();
      await settle();
      expect(trims).toBe(1); // within the interval
      t += 10_000;
      gc();
      await settle();
      expect(trims).toBe(2);
      expect(r.stats.releases).toBe(2);
    } finally {
      r.stop();
    }
    t += 10_000;
    gc();
    await settle();
    expect(trims).toBe(2);
  });

  it('does not trim after scavenges alone', async () => {
    let trims = 0;
    let minor = 0;
    const seen = new PerformanceObserver((l) => {
      for (const e of l.getEntries())
        if (
          (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR
        )
          minor++;
    });
    seen.observe({ entryTypes: ['gc'] });
    const r = releaseCHeapAfterMajorGc({ trim: () => (trims++, true), minIntervalMs: 0 });
    try {
      // Short-lived garbage: young-generation collections only.
      const keep: string[] = [];
      for (let i = 0; i < 2_000_000; i++) keep[i & 1023] = `x${i}`;
      await settle();
      expect(minor).toBeGreaterThan(0);
      expect(trims).toBe(0);
    } finally {
      r.stop();
      seen.disconnect();
    }
  });
});
