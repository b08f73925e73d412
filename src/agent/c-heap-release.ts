// Returns the C heap's free pages to the kernel after V8's major collections.
//
// A Buffer's memory (netlink dumps, iptables-save output, gzip streams) is malloc'ed
// and freed only when a major GC finds its JS object dead. glibc then keeps the freed
// pages unless they are at the top of its heap: after the first sync at 5,000
// Services, ~3 MB of the agent's RSS were such holes (malloc_trim measured from gdb,
// bench/agent.ts). So after a major GC, at most once per interval, they go back.
import { constants, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';

export interface CHeapRelease {
  stop(): void;
  /** Releases done. */
  readonly stats: { releases: number };
}

export interface CHeapReleaseOptions {
  /** The release itself: malloc_trim(0) (native/mem.c). */
  trim: () => boolean;
  /** At most one release per this many ms; major GCs in between are skipped. */
  minIntervalMs: number;
  now?: () => number;
}

const isMajorGc = (e: PerformanceEntry): boolean =>
  (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR;

export function releaseCHeapAfterMajorGc(o: CHeapReleaseOptions): CHeapRelease {
  const now = o.now ?? Date.now;
  const stats = { releases: 0 };
  let last = -Infinity;
  // The observer's callback runs on the event loop after the GC, not inside it.
  const obs = new PerformanceObserver((list) => {
    if (!list.getEntries().some(isMajorGc)) return;
    const t = now();
    if (t - last < o.minIntervalMs) return;
    last = t;
    o.trim();
    stats.releases++;
  });
  obs.observe({ entryTypes: ['gc'] });
  return { stop: () => obs.disconnect(), stats };
}
