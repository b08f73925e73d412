// The one loop every source goes through: times the read, turns a throw into down, and records health alike.

import { errText } from '../errors.js';
import type { Logger } from '../log.js';
import type { SourceStatus } from '../model/source-status.js';
import type { NodeData, ReadResult, SourceReader } from './contract.js';
import { SourceHealth } from './health.js';
import type { NodeSnapshot } from './node-snapshot.js';

/** A throwing reader is down for that reason, and it is a warning too: something was there but unreadable. */
function thrown(e: unknown): ReadResult<unknown> {
  return { state: 'down', reason: errText(e), warnings: [errText(e)] };
}

export class SourceRunner {
  readonly health: SourceHealth;
  /** Each source's last read, in seconds (clbprobe_source_duration_seconds). */
  readonly durations: Record<string, number> = {};
  private readonly values = new Map<string, { key?: keyof NodeData; value: unknown }>();
  /** Per source: its own status, then the parts it reports; in the order sources were first recorded. */
  private readonly statuses = new Map<string, SourceStatus[]>();

  constructor(log?: Logger) {
    this.health = new SourceHealth(log);
  }

  /** changed: the value or the availability changed, so what was built from the sources is stale. */
  async read(r: SourceReader) {
    const [out] = await this.readAll([r]);
    return out!;
  }

  /** A reader whose read is synchronous (a bundle's files), recorded at once. */
  readSync(reader: SourceReader) {
    const t0 = performance.now();
    let result: ReadResult<unknown>;
    try {
      const got = reader.read();
      if (got instanceof Promise) throw new Error(`source ${reader.name}: readSync of an asynchronous read`);
      result = got;
    } catch (e) {
      result = thrown(e);
    }
    return { changed: this.record(reader.name, result, performance.now() - t0, reader.key), result };
  }

  /** Reads concurrently, records in the given order (so statuses list in the sources' order). */
  async readAll(readers: readonly SourceReader[]) {
    const done = await Promise.all(
      readers.map(async (r) => {
        const t0 = performance.now();
        const result = await Promise.resolve()
          .then(() => r.read())
          .catch(thrown);
        return { r, result, ms: performance.now() - t0 };
      }),
    );
    return done.map(({ r, result, ms }) => ({ changed: this.record(r.name, result, ms, r.key), result }));
  }

  /** Records one read (also event-fed inputs); all but absent count a resync, down an error, unchanged keeps health. */
  record(name: string, result: ReadResult<unknown>, durationMs: number, key?: keyof NodeData): boolean {
    this.durations[name] = durationMs / 1000;
    if (result.state !== 'absent') this.health.resynced(name);
    if (result.state === 'unchanged') return false;
    const before = this.statuses.get(name)?.[0];
    const rounded = Math.round(durationMs * 1000) / 1000;
    const own: SourceStatus =
      result.state === 'up'
        ? { source: name, available: true, ...(result.note ? { reason: result.note } : {}), durationMs: rounded }
        : {
            source: name,
            available: false,
            reason: result.reason,
            ...(result.state === 'absent' ? { notPresent: true } : {}),
            durationMs: rounded,
          };
    this.statuses.set(name, [own, ...(result.parts ?? [])]);
    if (result.state === 'absent') {
      this.health.absent(name, result.reason);
      const had = this.values.delete(name);
      return had || !(before?.notPresent && before.reason === result.reason);
    }
    if (result.state === 'up') this.health.up(name);
    else this.health.down(name, result.reason);
    if (result.state === 'up' || result.value !== undefined) {
      this.values.set(name, { ...(key ? { key } : {}), value: result.value });
      return true;
    }
    return !(before && !before.available && !before.notPresent && before.reason === result.reason);
  }

  /** The last good value of a source (kept while it is down), undefined when none or absent. */
  value<T>(name: string): T | undefined {
    return this.values.get(name)?.value as T | undefined;
  }

  statusList(): SourceStatus[] {
    return [...this.statuses.values()].flat();
  }

  /** The snapshot of everything read so far, each value under its source's key. */
  snapshot(header: Pick<NodeSnapshot, 'takenAt' | 'hostname' | 'kernel'>): NodeSnapshot {
    const snap: NodeSnapshot = { ...header, sources: this.statusList() };
    const data = snap as NodeData;
    for (const { key, value } of this.values.values()) if (key) (data as Record<string, unknown>)[key] = value;
    return snap;
  }
}
