// A live pcap capture read in batches: the event loop watches the capture's
// fd, and each readable event drains whatever the kernel has handed over.
import { native } from '../native/index.js';
import type { PollHandle } from '../native/poll.js';
import { pcapAddon, PCAP_META_WORDS, type PcapAddon, type PcapHandle, type PcapOpenOptions } from '../native/pcap.js';
import { captureError } from './errors.js';

export interface PcapBatch {
  data: Uint8Array;
  /** PCAP_META_WORDS per packet: ts sec, ts usec, captured length, wire length, data offset. */
  meta: Uint32Array;
  count: number;
}

export interface PcapReaderOptions extends PcapOpenOptions {
  /** Packets per batch (sizes the metadata array). */
  batchPackets?: number;
  /** Bytes of packet data per batch; at least one snaplen. */
  batchBytes?: number;
}

export interface PcapStats {
  received: number;
  /** Dropped because the capture buffer was full. */
  dropped: number;
  /** Dropped by the interface/driver. */
  interfaceDropped: number;
}

export class PcapReader {
  readonly handle: PcapHandle;
  readonly linkType: number;
  private readonly addon: PcapAddon;
  private readonly batch: PcapBatch;
  private poll: PollHandle | undefined;
  private closed = false;

  constructor(
    readonly ifname: string,
    opts: PcapReaderOptions,
    private readonly onBatch: (b: PcapBatch) => void,
  ) {
    this.addon = pcapAddon();
    try {
      this.handle = this.addon.pcapOpen(ifname, opts);
    } catch (e) {
      throw captureError(e, 'pcap', `capturing on ${ifname}`);
    }
    this.linkType = this.addon.pcapDatalink(this.handle);
    const packets = opts.batchPackets ?? 4096;
    const snaplen = opts.snaplen ?? 262144;
    const bytes = Math.max(opts.batchBytes ?? packets * snaplen, snaplen);
    this.batch = { data: new Uint8Array(bytes), meta: new Uint32Array(packets * PCAP_META_WORDS), count: 0 };
  }

  setFilter(expression: string): void {
    this.addon.pcapSetFilter(this.handle, expression);
  }

  /** Starts delivering batches from the event loop. */
  start(): void {
    if (this.poll || this.closed) return;
    this.poll = native().pollStart(this.addon.pcapFd(this.handle), () => {
      // Bounded, so a flood cannot starve the event loop; the watcher is
      // level-triggered and fires again while packets are pending.
      if (!this.closed) this.drain(16);
    });
  }

  /** Reads what is pending now (up to maxBatches batches); returns the number of packets. */
  drain(maxBatches = Infinity): number {
    let total = 0;
    if (this.closed) return 0;
    for (let i = 0; i < maxBatches; i++) {
      const n = this.addon.pcapRead(this.handle, this.batch.data, this.batch.meta);
      if (n === 0) return total;
      this.batch.count = n;
      total += n;
      this.onBatch(this.batch);
      if (this.closed) break; // onBatch may end the capture
    }
    return total;
  }

  stats(): PcapStats {
    const [received, dropped, interfaceDropped] = this.addon.pcapStats(this.handle);
    return { received, dropped, interfaceDropped };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    // The watcher must stop before the fd closes.
    if (this.poll) native().pollStop(this.poll);
    this.addon.pcapClose(this.handle);
  }
}
