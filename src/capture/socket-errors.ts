// What a capture does after its socket reported an error: libuv stops a poll watcher on POLLERR, and an AF_PACKET
// socket's ENETDOWN is cleared by the next read, so watch again at once; a run of errors is slowed to one per
// RETRY_MS and, if it lasts, ends the capture with a reason.

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
