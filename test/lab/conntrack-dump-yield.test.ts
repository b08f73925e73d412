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
    let lastCpu = process.cpuUsage();
    let maxGap = 0;
    let maxCpuGap = 0;
    // CPU time between two ticks is the work done without a turn; wall time also counts the time a
    // loaded box did not run this process at all.
    const tick = (): void => {
      const now = performance.now();
      const cpu = process.cpuUsage(lastCpu);
      maxGap = Math.max(maxGap, now - last);
      maxCpuGap = Math.max(maxCpuGap, (cpu.user + cpu.system) / 1000);
      last = now;
      lastCpu = process.cpuUsage();
      ticks++;
    };
    const timer = setInterval(tick, 1);
    let entries = 0;
    const t0 = performance.now();
    try {
      await dumpConntrack((b) => void (entries += b.length), { netns: ns.path });
    } finally {
      clearInterval(timer);
    }
    tick(); // the stretch from the last turn to the dump's end
    const ms = performance.now() - t0;
    expect(entries).toBeGreaterThanOrEqual(ENTRIES);
    // The dump takes hundreds of ms; timers ran all along it, each wait about one slice.
    expect(ms).toBeGreaterThan(10 * LOOP_SLICE_MS);
    expect(ticks - 1).toBeGreaterThan(ms / (10 * LOOP_SLICE_MS));
    expect(
      maxCpuGap,
      `most CPU ms between two turns of a 1 ms timer during a ${ms.toFixed(0)} ms dump (longest wait ${maxGap.toFixed(0)} ms)`,
    ).toBeLessThan(10 * LOOP_SLICE_MS);
  });
});
