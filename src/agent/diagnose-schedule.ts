// One timer: a burst of changes makes one diagnosis; conntrack events re-diagnose at most every EVENTS_INTERVAL_MS.

/** A change is diagnosed this long after it, so that a burst of changes makes one diagnosis. */
export const DIAGNOSE_DELAY_MS = 1000;
/** Each diagnosis correlates every kept entry again, so event-driven ones are spaced; still well within a scrape. */
export const EVENTS_INTERVAL_MS = 3000;

export class DiagnoseSchedule {
  private timer?: NodeJS.Timeout;
  /** When the pending timer fires (ms since the epoch). */
  private at = 0;
  /** When the last scheduled diagnosis ran: events wait for the interval since then. */
  private ranAt = -Infinity;

  constructor(
    private readonly run: () => void,
    private readonly now: () => number = Date.now,
  ) {}

  /** A diagnosis soon: the index changed (after the delay) or conntrack did (also not before the interval). */
  request(why: 'events' | 'index'): void {
    const now = this.now();
    const at =
      why === 'events' ? Math.max(now + DIAGNOSE_DELAY_MS, this.ranAt + EVENTS_INTERVAL_MS) : now + DIAGNOSE_DELAY_MS;
    // A later request never puts the timer off; an index change can bring it forward.
    if (this.timer && this.at <= at) return;
    clearTimeout(this.timer);
    this.at = at;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.ranAt = this.now();
      this.run();
    }, at - now);
  }

  cancel(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
