// The agent's diagnosis timer: one diagnosis per burst of changes, and conntrack
// events in a steady stream diagnosed at most every EVENTS_INTERVAL_MS.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DIAGNOSE_DELAY_MS, DiagnoseSchedule, EVENTS_INTERVAL_MS } from '../../../src/agent/diagnose-schedule.js';

describe('DiagnoseSchedule', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  const schedule = () => {
    const runs: number[] = [];
    const s = new DiagnoseSchedule(() => runs.push(Date.now()));
    return { s, runs };
  };

  it('diagnoses a burst of changes once, DIAGNOSE_DELAY_MS after its first', () => {
    const { s, runs } = schedule();
    const t0 = Date.now();
    s.request('events');
    vi.advanceTimersByTime(500);
    s.request('events');
    s.request('index');
    vi.advanceTimersByTime(DIAGNOSE_DELAY_MS);
    expect(runs).toEqual([t0 + DIAGNOSE_DELAY_MS]);
  });

  it('diagnoses a steady stream of events every EVENTS_INTERVAL_MS, not every DIAGNOSE_DELAY_MS', () => {
    const { s, runs } = schedule();
    const t0 = Date.now();
    // An event every 100 ms for 10 s.
    for (let i = 0; i < 100; i++) {
      s.request('events');
      vi.advanceTimersByTime(100);
    }
    vi.advanceTimersByTime(EVENTS_INTERVAL_MS);
    expect(runs[0]).toBe(t0 + DIAGNOSE_DELAY_MS);
    for (let i = 1; i < runs.length; i++) expect(runs[i]! - runs[i - 1]!).toBeGreaterThanOrEqual(EVENTS_INTERVAL_MS);
    // 10 s of events: 1 s, 4 s, 7 s, 10 s.
    expect(runs.length).toBe(4);
  });

  it('takes the first events after a quiet spell after DIAGNOSE_DELAY_MS', () => {
    const { s, runs } = schedule();
    s.request('events');
    vi.advanceTimersByTime(DIAGNOSE_DELAY_MS + EVENTS_INTERVAL_MS);
    const t1 = Date.now();
    s.request('events');
    vi.advanceTimersByTime(DIAGNOSE_DELAY_MS);
    expect(runs.at(-1)).toBe(t1 + DIAGNOSE_DELAY_MS);
  });

  it('brings a diagnosis held back for events forward when the index changes', () => {
    const { s, runs } = schedule();
    s.request('events');
    vi.advanceTimersByTime(DIAGNOSE_DELAY_MS);
    expect(runs.length).toBe(1);
    s.request('events'); // held until EVENTS_INTERVAL_MS after the last run
    const t1 = Date.now();
    s.request('index');
    vi.advanceTimersByTime(DIAGNOSE_DELAY_MS);
    expect(runs).toEqual([runs[0], t1 + DIAGNOSE_DELAY_MS]);
    vi.advanceTimersByTime(EVENTS_INTERVAL_MS);
    expect(runs.length).toBe(2);
  });

  it('runs nothing once cancelled', () => {
    const { s, runs } = schedule();
    s.request('index');
    s.cancel();
    vi.advanceTimersByTime(10 * EVENTS_INTERVAL_MS);
    expect(runs).toEqual([]);
  });
});
