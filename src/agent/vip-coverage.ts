// Which LB VIP:ports full conntrack reads covered: events only tell of changing connections, so a new VIP needs a read.
// Reads are paced because they are costly and DNS can churn: the gap doubles while new VIPs keep coming.
import { type Key, key } from '../model/address-key.js';
import type { AddressPort } from '../model/ours.js';
import { protocolOfNumber } from '../model/protocol.js';

const keyOf = (v: AddressPort): Key => key(v.address, protocolOfNumber(v.protoNum) ?? String(v.protoNum), v.port);

/** Index changes come in bursts (the cluster view, then the DNS answers): a read waits this long for the rest. */
const NEW_VIP_READ_DELAY_MS = 1000;
/** The shortest gap between two reads for new VIPs; it doubles while they keep coming. */
const NEW_VIP_READ_MIN_GAP_MS = 30_000;

export interface NewVipReadOptions {
  /** Starts a full conntrack read (which calls readFor with its targets). */
  read: () => void;
  /** The longest gap between reads for new VIPs, and how long a VIP read for stays known (the periodic read's). */
  maxGapMs: number;
}

export class NewVipReads {
  /** VIP -> when a full read last looked for it (ms epoch). */
  private readonly readAt = new Map<Key, number>();
  private gapMs: number;
  private lastReadAt = -Infinity;
  private timer?: NodeJS.Timeout;
  private readonly minGapMs: number;

  constructor(private readonly o: NewVipReadOptions) {
    this.minGapMs = Math.min(NEW_VIP_READ_MIN_GAP_MS, o.maxGapMs);
    this.gapMs = this.minGapMs;
  }

  /** A full read (any: first, periodic, for new VIPs) starts with these targets. */
  readFor(vips: readonly AddressPort[]): void {
    const now = Date.now();
    for (const v of vips) this.readAt.set(keyOf(v), now);
    // VIPs not read for within maxGapMs are forgotten: the map stays as big as the recent churn.
    for (const [k, at] of this.readAt) if (now - at > this.o.maxGapMs) this.readAt.delete(k);
  }

  /** The index changed to these VIPs: a read is scheduled when no full read looked for one of them within maxGapMs. */
  changed(vips: readonly AddressPort[]): void {
    const now = Date.now();
    const missed = (v: AddressPort): boolean => now - (this.readAt.get(keyOf(v)) ?? -Infinity) > this.o.maxGapMs;
    if (this.timer || !vips.some(missed)) return;
    const wait = Math.max(NEW_VIP_READ_DELAY_MS, this.lastReadAt + this.gapMs - now);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.started();
      this.o.read();
    }, wait);
    this.timer.unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Doubles the gap while churn goes on; back to the shortest after a quiet spell as long as the longest gap. */
  private started(): void {
    const now = Date.now();
    const quietMs = now - (this.lastReadAt + this.gapMs);
    this.gapMs = quietMs >= this.o.maxGapMs ? this.minGapMs : Math.min(this.o.maxGapMs, this.gapMs * 2);
    this.lastReadAt = now;
  }
}
