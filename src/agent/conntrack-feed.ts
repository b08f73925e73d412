// Where the conntrack table comes from: live, a dump then events and periodic re-dumps; from a bundle, its file.
import type { BundleFiles } from '../bundle/files.js';
import { errText } from '../errors.js';
import { type ConntrackDumpResult, dumpConntrackViews, malformedNote } from '../kernel/conntrack/dump.js';
import { ConntrackWatch } from '../kernel/conntrack/events.js';
import type { ConntrackPrefilter } from '../kernel/conntrack/prefilter.js';
import type { ConntrackEntry } from '../kernel/types.js';
import type { Logger } from '../log.js';
import { conntrack } from '../source/conntrack.js';
import type { ReadResult } from '../source/contract.js';
import type { NodeSnapshot } from '../source/node-snapshot.js';
import type { ConntrackTable } from './conntrack-table.js';

/** What a feed fills and tells. */
export interface ConntrackSink {
  table: ConntrackTable;
  /** A full read ended (or failed): recorded as the conntrack source's read, through the runner. */
  record(result: ReadResult<unknown>, durationMs: number): void;
  /** The feed failed outside a read (the event socket). */
  down(reason: string): void;
  /** The table changed (an event): the diagnosis may be due. */
  changed(): void;
}

export interface ConntrackFeed {
  /** Fills the table with a first full read and follows it from then on; resolves after that read. */
  start(sink: ConntrackSink, prefilter: ConntrackPrefilter): Promise<void>;
  resync(): Promise<void>;
  /** The Service index changed: skip what touches no LB Service of the new one. */
  setPrefilter(p: ConntrackPrefilter): void;
  stop(): void;
}

/** No key is recorded: the table, not a snapshot value, is what the diagnosis reads of conntrack. */
const UP: ReadResult<unknown> = { state: 'up', value: undefined };

export class LiveConntrack implements ConntrackFeed {
  private watch?: ConntrackWatch;
  /** The "table full" warning was logged and the table has stayed full since. */
  private fullLogged = false;
  private sink?: ConntrackSink;
  private prefilter?: ConntrackPrefilter;

  constructor(
    private readonly o: {
      log: Logger;
      netns?: string;
      /** Drop events that touch no LB Service in the kernel (an eBPF socket filter); falls back to user space. */
      kernelFilter: boolean;
    },
  ) {}

  private get ns(): { netns?: string } {
    return this.o.netns ? { netns: this.o.netns } : {};
  }

  async start(sink: ConntrackSink, prefilter: ConntrackPrefilter): Promise<void> {
    this.sink = sink;
    this.prefilter = prefilter;
    const { table } = sink;
    let first!: () => void;
    let dumpStart = performance.now();
    let read = 0;
    const done = new Promise<void>((r) => (first = r));
    try {
      this.watch = new ConntrackWatch({
        ...this.ns,
        initialDump: true,
        prefilter,
        kernelFilter: this.o.kernelFilter,
        // Decoded in place: an event allocates only the entry the table keeps.
        onView: (type, v, at) => {
          if (table.event(type, v, at)) sink.changed();
        },
        resync: {
          begin: () => {
            dumpStart = performance.now();
            read = table.beginResync();
          },
          view: (v) => void table.upsert(v, Date.now()),
          end: (info) => {
            table.endResync(read);
            this.recordDump(info, performance.now() - dumpStart);
            if (info.interrupted) this.o.log.info(info, 'conntrack resync interrupted by table changes');
            sink.changed();
            first();
          },
        },
        onError: (e) => {
          sink.down(e.message);
          first();
        },
        onMalformed: (e) => {
          // The first one is logged; the count goes into the source's note at the next dump.
          if (this.watch?.stats.malformed === 1)
            this.o.log.warn({ error: e.message }, 'conntrack event skipped as malformed');
        },
      });
    } catch (e) {
      sink.down(errText(e));
      return;
    }
    this.logKernelFilter();
    await done;
  }

  async resync(): Promise<void> {
    const { watch, sink } = this;
    if (!watch || !sink) return;
    const t0 = performance.now();
    try {
      const read = sink.table.beginResync();
      const now = Date.now();
      const res = await dumpConntrackViews((v) => void sink.table.upsert(v, now), {
        ...this.ns,
        ...(this.prefilter ? { prefilter: this.prefilter } : {}),
      });
      sink.table.endResync(read);
      this.recordDump(res, performance.now() - t0);
    } catch (e) {
      sink.record({ state: 'down', reason: `dump: ${errText(e)}` }, performance.now() - t0);
    }
  }

  setPrefilter(prefilter: ConntrackPrefilter): void {
    this.prefilter = prefilter;
    if (!this.watch) return;
    const was = this.watch.stats.kernelFilter;
    this.watch.setPrefilter(prefilter);
    if (this.watch.stats.kernelFilter !== was) this.logKernelFilter();
  }

  stop(): void {
    this.watch?.stop();
  }

  /** A dump or stream that skipped malformed entries is up, with how many in the status reason. */
  private recordDump(dump: Pick<ConntrackDumpResult, 'malformed' | 'firstMalformed'>, durationMs: number): void {
    const events = this.watch?.stats;
    const full = this.sink!.table.fullNote;
    // Logged when the table becomes full; the note and the refused-entries counter say it at every read.
    if (full && !this.fullLogged)
      this.o.log.warn({ kept: this.sink!.table.size, refused: this.sink!.table.dropped }, full);
    this.fullLogged = full !== undefined;
    const notes = [malformedNote(dump), full];
    if (events?.malformed) {
      notes.push(
        `${events.malformed} malformed conntrack ${events.malformed === 1 ? 'event' : 'events'} ` +
          `skipped since start (first: ${events.firstMalformed})`,
      );
    }
    const note = notes.filter((n): n is string => !!n).join('; ');
    this.sink!.record(note ? { state: 'up', value: undefined, note } : UP, durationMs);
    if (dump.malformed)
      this.o.log.warn(
        { malformed: dump.malformed, first: dump.firstMalformed },
        'conntrack dump skipped malformed entries',
      );
  }

  /** Where conntrack events that touch no LB Service are dropped, once at start and when it changes. */
  private logKernelFilter(): void {
    const state = this.watch!.stats.kernelFilter;
    if (state === 'on') this.o.log.info('conntrack events pre-filtered in the kernel (eBPF socket filter)');
    else if (state !== 'not requested')
      this.o.log.warn({ reason: state }, 'conntrack events filtered in user space only');
  }
}

/** A bundle's conntrack file, put in the table on each read as a live dump is; no events. */
export class BundleConntrack implements ConntrackFeed {
  private sink?: ConntrackSink;
  constructor(
    private readonly files: BundleFiles,
    /** What the bundle's entries are seen at (Date.now()), so that a replay gives the same ages. */
    private readonly seenAtMs: () => number = Date.now,
  ) {}

  async start(sink: ConntrackSink): Promise<void> {
    this.sink = sink;
    await this.resync();
  }

  async resync(): Promise<void> {
    const sink = this.sink;
    if (!sink) return;
    const t0 = performance.now();
    let result: ReadResult<NonNullable<NodeSnapshot['conntrack']>>;
    try {
      result = conntrack.fromBundle!(this.files);
    } catch (e) {
      result = { state: 'down', reason: errText(e) };
    }
    if (result.state === 'up' || (result.state === 'down' && result.value)) {
      const entries: ConntrackEntry[] = result.value?.entries ?? [];
      const now = this.seenAtMs();
      const read = sink.table.beginResync();
      for (const e of entries) sink.table.upsert(e, now);
      sink.table.endResync(read);
    }
    const full = sink.table.fullNote;
    const up: ReadResult<unknown> = full ? { state: 'up', value: undefined, note: full } : UP;
    sink.record(result.state === 'up' ? up : result, performance.now() - t0);
    sink.changed();
  }

  setPrefilter(): void {}

  stop(): void {}
}
