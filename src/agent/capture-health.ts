// The capture source's health from the counters: down with a reason while they count nothing, up again when a scrape
// sees them counting, unless something else (a failed target update) put it down since.
import type { SourceHealth } from '../source/health.js';

export class CaptureHealth {
  /** What the source says while the counters count (the last targets applied). */
  private notes: string | undefined;
  /** Why the source is down because the counters count nothing. */
  private notCounting: string | undefined;

  constructor(private readonly health: SourceHealth) {}

  /** Targets applied: `notes` say what the counters cannot count, `stopped` why they count nothing. */
  applied(notes: string | undefined, stopped: string | undefined): void {
    this.notes = notes;
    if (stopped !== undefined) {
      this.read(stopped);
      return;
    }
    this.notCounting = undefined;
    this.health.up('capture', notes);
  }

  /** After a scrape read the counters: why they count nothing, undefined while they count. */
  readonly read = (down: string | undefined): void => {
    if (down !== undefined) {
      this.notCounting = down;
      this.health.down('capture', down);
      return;
    }
    if (this.notCounting === undefined) return;
    if (this.health.reasonOf('capture') === this.notCounting) this.health.up('capture', this.notes);
    this.notCounting = undefined;
  };
}
