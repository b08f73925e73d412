// What a capture does after its socket reported an error. libuv stops a poll
// watcher on POLLERR (one callback with a negative status, then silence), so
// every error needs a decision: watch again now, watch again later, or give up.
// An AF_PACKET socket gets one error per link down (ENETDOWN), which the next
// read clears: watching again at once is right. An error that comes straight
// back would turn "watch again at once" into a busy loop, so a run of them is
// slowed to one per RETRY_MS and, if it lasts, ends the capture with a reason.

/** Errors closer together than this belong to one run. */
export const RUN_GAP_MS = 5000;
/** From the second error of a run on, the watcher waits this long before watching again. */
export const RETRY_MS = 1000;
/** A run longer than this ends the capture (about 4 s of errors at RETRY_MS). */
export const MAX_RUN = 5;

export type SocketErrorAction =
  | { watch: 'now' }
  | { watch: 'later'; afterMs: number }
  | { watch: 'never'; run: number };

export class SocketErrorPolicy {
  private run = 0;
  private lastAt = -Infinity;
  /** Errors seen since the capture opened. */
  total = 0;

  /** One error reported at `nowMs` (a monotonic clock). */
  onError(nowMs: number): SocketErrorAction {
    this.total++;
    this.run = nowMs - this.lastAt < RUN_GAP_MS ? this.run + 1 : 1;
    this.lastAt = nowMs;
    if (this.run > MAX_RUN) return { watch: 'never', run: this.run };
    return this.run === 1 ? { watch: 'now' } : { watch: 'later', afterMs: RETRY_MS };
  }
}
