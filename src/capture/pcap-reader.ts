// A live pcap capture read in batches from the event loop. A socket error (link down) stops libuv's watcher and an
// AF_PACKET socket's ENETDOWN is cleared by the next read, so the reader reads and watches again at once; a run of
// errors is slowed to one per RETRY_MS and, if it lasts, ends the capture with a reason, as a deleted interface does.
import { performance } from 'node:perf_hooks';
import { errText } from '../errors.js';
import { native } from '../native/index.js';
import { PCAP_META_WORDS, type PcapHandle, type PcapOpenOptions, pcapAddon } from '../native/pcap.js';
import { type PollHandle, UV_READABLE } from '../native/poll.js';
import { step } from './errors.js';

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

export interface PcapBatch {
  data: Uint8Array;
  /** PCAP_META_WORDS per packet: ts sec, ts usec, captured length, wire length, data offset. */
  meta: Uint32Array;
  count: number;
}

export interface PcapReaderOptions extends PcapOpenOptions {
  batchPackets?: number;
  /** Bytes of packet data per batch; at least one snaplen. */
  batchBytes?: number;
  /** The capture stopped for good (its interface was deleted...): called once, from the event loop. */
  onStopped?: (reason: string) => void;
  /** The socket reported an error and the reader watches it again (e.g. the link went down). */
  onSocketError?: () => void;
}

export class PcapReader {
  readonly handle: PcapHandle;
  readonly linkType: number;
  private readonly addon = pcapAddon();
  private readonly batch: PcapBatch;
  private poll: PollHandle | undefined;
  private closed = false;
  private readonly errors = new SocketErrorPolicy();
  private retry: NodeJS.Timeout | undefined;
  /** Why the capture stopped; set once, then the reader delivers nothing more. */
  stopped: string | undefined;

  constructor(
    readonly ifname: string,
    private readonly opts: PcapReaderOptions,
    private readonly onBatch: (b: PcapBatch) => void,
  ) {
    this.handle = step('pcap', `capturing on ${ifname}`, () => this.addon.pcapOpen(ifname, opts));
    this.linkType = this.addon.pcapDatalink(this.handle);
    const packets = opts.batchPackets ?? 4096;
    const snaplen = opts.snaplen ?? 262144;
    const bytes = Math.max(opts.batchBytes ?? packets * snaplen, snaplen);
    this.batch = { data: new Uint8Array(bytes), meta: new Uint32Array(packets * PCAP_META_WORDS), count: 0 };
  }

  setFilter(expression: string): void {
    if (this.stopped !== undefined) return; // nothing is read any more
    this.addon.pcapSetFilter(this.handle, expression);
  }

  get socketErrors(): number {
    return this.errors.total;
  }

  start(): void {
    if (this.poll || this.closed) return;
    this.poll = native().pollStart(this.addon.pcapFd(this.handle), (status) => this.onPoll(status));
  }

  private onPoll(status: number): void {
    if (this.closed || this.stopped !== undefined) return;
    try {
      // Bounded so a flood cannot starve the loop; after an error status this read also clears SO_ERROR.
      this.drain(16);
      if (status < 0 && !this.closed && this.stopped === undefined) this.onSocketError(status);
    } catch (e) {
      // A failing onBatch or hook is a bug, but a throw from here would be an uncaught exception.
      this.stop(`reading the capture failed: ${errText(e)}`);
    }
  }

  private onSocketError(status: number): void {
    // libuv saw POLLERR and stopped watching: watch again, or nothing is ever read again.
    const next = this.errors.onError(performance.now());
    if (next.watch === 'never') {
      this.stop(`the capture socket keeps reporting an error (${next.run} in a row, libuv status ${status})`);
      return;
    }
    this.opts.onSocketError?.();
    if (next.watch === 'now') this.watchAgain();
    else {
      this.retry = setTimeout(() => {
        this.retry = undefined;
        this.watchAgain();
      }, next.afterMs);
    }
  }

  private watchAgain(): void {
    if (this.closed || this.stopped !== undefined) return;
    try {
      native().pollSet(this.poll!, UV_READABLE);
    } catch (e) {
      this.stop(`watching the capture socket again failed: ${errText(e)}`);
    }
  }

  /** Ends delivery for good; the handle stays open for stats() until close(). */
  private stop(reason: string): void {
    if (this.stopped !== undefined || this.closed) return;
    this.stopped = reason;
    clearTimeout(this.retry);
    if (this.poll) native().pollSet(this.poll, 0);
    this.opts.onStopped?.(reason);
  }

  /** Reads what is pending (up to maxBatches batches) and returns the packet count; an unreadable capture stops. */
  drain(maxBatches = Infinity): number {
    let total = 0;
    if (this.closed || this.stopped !== undefined) return 0;
    for (let i = 0; i < maxBatches; i++) {
      let n: number;
      try {
        n = this.addon.pcapRead(this.handle, this.batch.data, this.batch.meta);
      } catch (e) {
        this.stop(errText(e));
        return total;
      }
      if (n === 0) return total;
      this.batch.count = n;
      total += n;
      this.onBatch(this.batch);
      if (this.closed) break; // onBatch may end the capture
    }
    return total;
  }

  stats(): { received: number; dropped: number; interfaceDropped: number } {
    const [received, dropped, interfaceDropped] = this.addon.pcapStats(this.handle);
    return { received, dropped, interfaceDropped };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.retry);
    // The watcher must stop before the fd closes.
    if (this.poll) native().pollStop(this.poll);
    this.addon.pcapClose(this.handle);
  }
}
