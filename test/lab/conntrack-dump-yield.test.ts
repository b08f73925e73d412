// A big conntrack dump gives the event loop a turn every LOOP_SLICE_MS: the kernel makes a
// dump's next messages when we receive, so the socket is never empty until the dump ends, and
// without the turns /healthz, /metrics and the evidence socket waited for the whole dump (4 s
// at 1M entries). Entries are inserted over ctnetlink into a namespace of this test (cbdy-*).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fill, raiseConntrackMax } from '../../bench/conntrack-dump.js';
import { dumpConntrack } from '../../src/kernel/conntrack/dump.js';
import { LOOP_SLICE_MS } from '../../src/kernel/netlink/socket.js';
import { isRoot, Netns } from '../support/netns.js';

const ENTRIES = 100_000;

describe.skipIf(!isRoot)('conntrack dump and the event loop', () => {
  let ns: Netns;
  let restoreMax: (() => void) | undefined;
  beforeAll(() => {
    restoreMax = raiseConntrackMax(ENTRIES);
    ns = Netns.create('cbdy-ct');
    fill(ns.path, ENTRIES);
  }, 60_000);
  afterAll(() => {
    ns?.delete();
    restoreMax?.();
  });

  it(`lets timers run during a dump of ${ENTRIES} entries`, async () => {
    let ticks = 0;
    let last = performance.now();
    let maxGap = 0;
    const timer = setInterval(() => {
      const now = performance.now();
      maxGap = Math.max(maxGap, now - last);
      last = now;
      ticks++;
    }, 1);
    let entries = 0;
    const t0 = performance.now();
    try {
      await dumpConntrack((b) => void (entries += b.length), { netns: ns.path });
    } finally {
      clearInterval(timer);
    }
    const ms = performance.now() - t0;
    expect(entries).toBeGreaterThanOrEqual(ENTRIES);
    // The dump takes hundreds of ms; timers ran all along it, each wait about one slice.
    expect(ms).toBeGreaterThan(10 * LOOP_SLICE_MS);
    expect(ticks).toBeGreaterThan(ms / (10 * LOOP_SLICE_MS));
    expect(maxGap, `longest wait of a 1 ms timer during a ${ms.toFixed(0)} ms dump`).toBeLessThan(10 * LOOP_SLICE_MS);
  });
});
