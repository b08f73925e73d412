// Each source's health, resync and error counts; health changes are logged once, so the log reads as a history.
import { byText } from '../compare.js';
import type { Logger } from '../log.js';

export class SourceHealth {
  private readonly state = new Map<string, { up: boolean; reason?: string; absent?: boolean }>();
  readonly resyncs: Record<string, number> = {};
  readonly errors: Record<string, number> = {};

  /** Without a logger (snapshot, bundle reading) changes are only recorded. */
  constructor(private readonly log?: Logger) {}

  /** A good read; `degraded` says what works less well than it should (e.g. capture fell back to pcap). */
  up(source: string, degraded?: string): void {
    const was = this.state.get(source);
    this.state.set(source, degraded === undefined ? { up: true } : { up: true, reason: degraded });
    if (degraded !== undefined && (!was?.up || was.reason !== degraded))
      this.log?.warn({ source, reason: degraded }, 'source up, degraded');
    else if (!was?.up) this.log?.info({ source }, was ? 'source recovered' : 'source up');
  }

  /** A failed read: counted, and logged when the health or the reason changes. */
  down(source: string, reason: string, countError = true): void {
    const was = this.state.get(source);
    this.state.set(source, { up: false, reason });
    if (countError) this.errors[source] = (this.errors[source] ?? 0) + 1;
    if (was?.up !== false || was.reason !== reason) this.log?.warn({ source, reason }, 'source down');
  }

  /** No such datapath is not a failure: no error and no clbprobe_source_up series, so no alert pages for nothing. */
  absent(source: string, reason: string): void {
    const was = this.state.get(source);
    this.state.set(source, { up: false, reason, absent: true });
    if (!was?.absent) this.log?.info({ source, reason }, 'source not present on this node');
  }

  resynced(source: string): void {
    this.resyncs[source] = (this.resyncs[source] ?? 0) + 1;
  }

  /** Why a source is down, absent or degraded; undefined while it is fully up. */
  reasonOf(source: string): string | undefined {
    return this.state.get(source)?.reason;
  }

  list(): { source: string; up: boolean }[] {
    return [...this.state]
      .filter(([, s]) => !s.absent)
      .map(([source, s]) => ({ source, up: s.up }))
      .sort((a, b) => byText(a.source, b.source));
  }
}
