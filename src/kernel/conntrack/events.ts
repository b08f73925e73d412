// Conntrack event stream with a large receive buffer and automatic resync: when the kernel drops events
// (ENOBUFS), a dump on a second socket re-reads the table so state derived from events is rebuilt.

import { errText } from '../../errors.js';
import { isSyscallError } from '../../native/addon.js';
import { explainBpfRefusal, ownBpfPrivileges } from '../../native/bpf-refusal.js';
import { NetlinkParseError } from '../netlink/codec.js';
import { NETLINK_NETFILTER, NetlinkSocket, NOTIFICATION_BATCH } from '../netlink/socket.js';
import type { ConntrackEntry, ConntrackEvent, ConntrackEventType } from '../types.js';
import * as C from './constants.js';
import { CtView, eventType } from './decode.js';
import { type ConntrackDumpResult, dumpConntrack, dumpConntrackViews, keepFor, openConntrackSocket } from './dump.js';
import { KernelEventFilter, type KernelFilterStats } from './kernel-filter.js';
import type { ConntrackPrefilter } from './prefilter.js';

interface ResyncCommon {
  /** A resync starts: state built from events is no longer trustworthy. */
  begin(reason: 'overflow' | 'start'): void;
  /** The table was read completely; `malformed` entries were skipped (dump.ts malformedNote describes them). */
  end(
    info: Pick<ConntrackDumpResult, 'entries' | 'interrupted' | 'malformed' | 'firstMalformed'> & {
      durationMs: number;
    },
  ): void;
}

/** The re-read table is handed over as entries, batch by batch, or entry by entry as the decoded message (view). */
export type ResyncHandler = ResyncCommon &
  (
    | { entries(batch: ConntrackEntry[]): void; view?: undefined }
    | {
        /** Valid only during the call, so that a consumer that keeps few entries allocates only those. */
        view(v: CtView): void;
        entries?: undefined;
      }
  );

/** Rest after a drained event queue so that events arriving one by one are read in batches. */
const PACE_MS = 100;

interface WatchCommon {
  netns?: string;
  /** Receive buffer (SO_RCVBUFFORCE), sized to absorb a large table flush. */
  rcvbuf?: number;
  events?: ConntrackEventType[];
  /** Skips events and dumped entries before decoding (see prefilter.ts); replace with setPrefilter(). */
  prefilter?: ConntrackPrefilter;
  /**
   * Also runs the prefilter in the kernel (kernel-filter.ts socket filter; needs targetKeys()); if it cannot
   * load, filtering stays in user space and stats.kernelFilter says why.
   */
  kernelFilter?: boolean;
  /** Without a handler, overflows are only counted. */
  resync?: ResyncHandler;
  /** Dump the table once at start, through resync.begin('start'). */
  initialDump?: boolean;
  onError?(e: Error): void;
  /** An event was skipped as malformed (stats.malformed counts them). */
  onMalformed?(e: NetlinkParseError): void;
}

/** Events are handed over as entries (onEvent) or as the decoded message (onView). */
export type WatchOptions = WatchCommon &
  (
    | { onEvent(ev: ConntrackEvent): void; onView?: undefined }
    | {
        /** Each event decoded in place: the same view object, valid only during the call. */
        onView(type: ConntrackEventType, v: CtView, receivedAtMs: number): void;
        onEvent?: undefined;
      }
  );

export interface WatchStats {
  events: number;
  overflows: number;
  resyncs: number;
  /** Effective receive buffer the kernel granted. */
  rcvbuf: number;
  /** 'on' while the kernel pre-checks events; otherwise 'not requested' or 'off: <why>'. */
  kernelFilter: string;
  /** Events whose attributes did not parse: skipped, the rest of their batch delivered. */
  malformed: number;
  /** The first of them: why it was refused. */
  firstMalformed?: string;
}

/** What the event view points at between batches. */
const NO_BYTES = Buffer.alloc(0);

const GROUP: Record<ConntrackEventType, number> = {
  NEW: C.NFNLGRP_CONNTRACK_NEW,
  UPDATE: C.NFNLGRP_CONNTRACK_UPDATE,
  DESTROY: C.NFNLGRP_CONNTRACK_DESTROY,
};

export class ConntrackWatch {
  readonly stats: WatchStats;
  private readonly events: NetlinkSocket;
  private readonly dumps: NetlinkSocket;
  private readonly stopSub: () => void;
  private resyncing: Promise<void> | undefined;
  private resyncAgain = false;
  private stopped = false;
  private prefilter: ConntrackPrefilter | undefined;
  private kernel?: KernelEventFilter;

  constructor(private readonly opts: WatchOptions) {
    this.prefilter = opts.prefilter;
    this.events = NetlinkSocket.open(NETLINK_NETFILTER, {
      ...NOTIFICATION_BATCH,
      rcvbuf: opts.rcvbuf ?? 64 << 20,
      ...(opts.netns ? { netns: opts.netns } : {}),
    });
    try {
      for (const t of opts.events ?? ['NEW', 'UPDATE', 'DESTROY']) this.events.addMembership(GROUP[t]);
      this.dumps = openConntrackSocket(opts.netns);
    } catch (e) {
      this.events.close();
      throw e;
    }
    this.stats = {
      events: 0,
      overflows: 0,
      resyncs: 0,
      rcvbuf: this.events.rcvbuf,
      kernelFilter: 'not requested',
      malformed: 0,
    };
    const view = new CtView();
    this.stopSub = this.events.subscribe(
      (msgs) => {
        const now = Date.now();
        for (const m of msgs) {
          const type = eventType(m);
          if (!type) continue;
          // The socket's keepFor already dropped the messages the prefilter rejects.
          const p = m.payload;
          try {
            view.decode(p, 0, p.length);
          } catch (e) {
            if (!(e instanceof NetlinkParseError)) throw e;
            this.stats.malformed++;
            this.stats.firstMalformed ??= e.message;
            opts.onMalformed?.(e);
            continue;
          }
          this.stats.events++;
          if (opts.onEvent) opts.onEvent({ type, entry: view.toEntry(), receivedAtMs: now });
          else opts.onView(type, view, now);
        }
        // The view must not keep the receive buffer between batches.
        view.buf = NO_BYTES;
      },
      () => {
        this.stats.overflows++;
        this.requestResync('overflow');
      },
      (e) => this.error(e),
      keepFor(() => this.prefilter),
      PACE_MS,
    );
    if (opts.kernelFilter) this.startKernelFilter();
    if (opts.initialDump) this.requestResync('start');
  }

  /** What the caller keeps changed (new Services, addresses): applies to the next event and dump. */
  setPrefilter(p: ConntrackPrefilter | undefined): void {
    this.prefilter = p;
    if (!this.kernel) return;
    const keys = p?.targetKeys();
    if (!keys) {
      this.stopKernelFilter('the prefilter has no target sets');
      return;
    }
    try {
      this.kernel.sync(keys);
    } catch (e) {
      this.stopKernelFilter(`updating its keys: ${errText(e)}`);
    }
  }

  /** Events the kernel filter passed and dropped; undefined while it is not on. */
  kernelFilterStats(): KernelFilterStats | undefined {
    return this.kernel?.stats();
  }

  private startKernelFilter(): void {
    const keys = this.prefilter?.targetKeys();
    if (!keys) {
      this.stats.kernelFilter = 'off: the prefilter has no target sets';
      return;
    }
    let f: KernelEventFilter | undefined;
    try {
      f = KernelEventFilter.open();
      f.sync(keys);
      f.attach(this.events);
      this.kernel = f;
      this.stats.kernelFilter = 'on';
    } catch (e) {
      f?.close();
      // A refused bpf() says whether a capability, seccomp or the kernel is why (as the counters do).
      const cause = isSyscallError(e) ? explainBpfRefusal(e.code, ownBpfPrivileges()) : undefined;
      this.stats.kernelFilter = `off: ${cause ? `${cause} (${errText(e)})` : errText(e)}`;
    }
  }

  /** Back to user-space filtering only: a map that may lack targets must not drop events. */
  private stopKernelFilter(why: string): void {
    const f = this.kernel;
    this.kernel = undefined;
    this.stats.kernelFilter = `off: ${why}`;
    try {
      f?.detach();
    } catch (e) {
      // Still attached with a map that may lack targets: events can be lost, which must not be silent.
      this.error(new Error(`conntrack events: cannot detach the kernel filter (${errText(e)})`));
    } finally {
      f?.close();
    }
  }

  /** Resolves when no resync is running (tests, orderly shutdown). */
  async idle(): Promise<void> {
    while (this.resyncing) await this.resyncing;
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.stopSub();
    this.events.close();
    this.kernel?.close();
    this.kernel = undefined;
    // The dump socket is closed once a running resync has finished with it.
    if (this.resyncing) void this.resyncing.finally(() => this.dumps.close());
    else this.dumps.close();
  }

  private error(err: Error): void {
    if (this.opts.onError) this.opts.onError(err);
    else throw err;
  }

  private requestResync(reason: 'overflow' | 'start'): void {
    if (!this.opts.resync || this.stopped) return;
    if (this.resyncing) {
      // Events lost while a dump runs may predate what the dump saw: go again.
      this.resyncAgain = true;
      return;
    }
    const handler = this.opts.resync;
    this.resyncing = (async () => {
      do {
        this.resyncAgain = false;
        this.stats.resyncs++;
        const t0 = performance.now();
        handler.begin(reason);
        const dumpOpts = {
          socket: this.dumps,
          ...(this.prefilter ? { prefilter: this.prefilter } : {}),
        };
        const res = handler.entries
          ? await dumpConntrack((b) => handler.entries(b), dumpOpts)
          : await dumpConntrackViews((v) => handler.view(v), dumpOpts);
        handler.end({
          entries: res.entries,
          durationMs: performance.now() - t0,
          interrupted: res.interrupted,
          malformed: res.malformed,
          ...(res.firstMalformed ? { firstMalformed: res.firstMalformed } : {}),
        });
      } while (this.resyncAgain && !this.stopped);
    })()
      .catch((e: unknown) => this.error(e as Error))
      .finally(() => {
        this.resyncing = undefined;
        // Dumps on this socket are rare, so its buffer is not kept between them.
        this.dumps.releaseBuffer();
      });
  }
}
