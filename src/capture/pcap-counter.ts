// The pcap counter backend (fallback when eBPF cannot run): one headers-only capture per direction with a kernel
// filter passing candidates, counted by classify.ts; it counts skbs, not GSO segments, and losses show as drops.
import { performance } from 'node:perf_hooks';
import { errText } from '../errors.js';
import type { Logger } from '../log.js';
import { PCAP_META_WORDS } from '../native/pcap.js';
import { classify, LINK_HEADER_LENGTHS, parseHeaders, TargetIndex } from './classify.js';
import type { Counter, CounterOptions } from './counter-types.js';
import { CaptureError } from './errors.js';
import { egressFilter, ingressFilter, MATCH_PORT_PROTOCOLS } from './pcap-filter.js';
import { type PcapBatch, PcapReader } from './pcap-reader.js';
import {
  type CounterReading,
  type CounterSample,
  type Direction,
  formatAddress16,
  PROTO_NAMES,
  type Targets,
  validateTargets,
} from './targets.js';

/** Enough for Ethernet + VLAN + IPv6 with an extension header + ports. */
const SNAPLEN = 128;
const DEFAULT_BUFFER = 8 << 20;
/** Socket errors (link downs) are logged at most this often. */
const SOCKET_ERROR_LOG_MS = 60_000;
const NO_TARGETS: Targets = { vips: [], localPrefixes: [], nodePorts: [] };
const FILTERS = { egress: egressFilter, ingress: ingressFilter };

export class PcapCounter implements Counter {
  readonly backend = 'pcap' as const;
  readonly description: string;
  fallbackReason?: string;
  private index = new TargetIndex(NO_TARGETS);
  private readonly samples = new Map<string, CounterSample>();
  private readonly seen = { ingress: 0, egress: 0 };
  private readonly readers = new Map<Direction, PcapReader>();
  /** Bytes before the network header in each direction's frames. */
  private readonly l2 = new Map<Direction, number>();
  private closed = false;
  /** Why counting stopped (e.g. the interface was deleted), the counts so far kept; undefined while counting. */
  stopped: string | undefined;
  private socketErrorsLogged = { at: -Infinity, count: 0 };

  private constructor(
    readonly ifname: string,
    private readonly log?: Logger,
  ) {
    this.description = `pcap on ${ifname}`;
  }

  static open(opts: CounterOptions): PcapCounter {
    const c = new PcapCounter(opts.ifname, opts.logger);
    try {
      for (const direction of ['ingress', 'egress'] as const) c.openReader(direction, opts);
      c.setTargets(NO_TARGETS);
      for (const r of c.readers.values()) r.start();
    } catch (e) {
      c.close();
      throw e;
    }
    opts.logger?.info({ ifname: opts.ifname }, 'pcap counters capturing');
    return c;
  }

  private openReader(direction: Direction, opts: CounterOptions): void {
    const r = new PcapReader(
      this.ifname,
      {
        snaplen: SNAPLEN,
        bufferSize: opts.pcapBufferSize ?? DEFAULT_BUFFER,
        timeoutMs: 100,
        immediate: 0,
        direction: direction === 'ingress' ? 1 : 2,
        netnsPath: opts.netnsPath,
        batchPackets: 4096,
        onStopped: (reason) => this.readerStopped(direction, reason),
        onSocketError: () => this.socketError(),
      },
      (b) => this.count(b, direction),
    );
    this.readers.set(direction, r);
    const l2 = LINK_HEADER_LENGTHS.get(r.linkType);
    if (l2 === undefined) {
      throw new CaptureError(`pcap: link type ${r.linkType} of ${this.ifname} is not supported`, 'EOPNOTSUPP', 'pcap');
    }
    this.l2.set(direction, l2);
  }

  private readerStopped(direction: Direction, reason: string): void {
    this.stopped ??=
      `pcap capture on ${this.ifname} (${direction}) stopped: ` +
      `${reason}; ${direction} packets are not counted since`;
    this.log?.error({ ifname: this.ifname, direction, reason }, 'pcap capture stopped; the counters no longer count');
  }

  private socketError(): void {
    const now = performance.now();
    const total = [...this.readers.values()].reduce((n, r) => n + r.socketErrors, 0);
    if (now - this.socketErrorsLogged.at < SOCKET_ERROR_LOG_MS) return;
    this.log?.warn(
      { ifname: this.ifname, socketErrors: total, sinceLastLog: total - this.socketErrorsLogged.count },
      'pcap capture socket reported an error (the link went down?); capturing again',
    );
    this.socketErrorsLogged = { at: now, count: total };
  }

  setTargets(targets: Targets): void {
    if (this.closed) throw new Error('pcap counter already closed');
    validateTargets(targets);
    // Count what is already captured under the old sets first.
    this.drainAll();
    this.index = new TargetIndex(targets);
    for (const direction of ['egress', 'ingress'] as const) {
      const reader = this.readers.get(direction)!;
      const expression = FILTERS[direction](targets);
      if (reader.stopped !== undefined) continue;
      try {
        reader.setFilter(expression);
      } catch (e) {
        // Too many targets for one classic BPF program: pass every candidate protocol and let classify() decide.
        this.log?.warn(
          { direction, reason: errText(e), length: expression.length },
          'pcap filter rejected; capturing all TCP/UDP/SCTP headers instead',
        );
        reader.setFilter(MATCH_PORT_PROTOCOLS);
      }
    }
  }

  private count(b: PcapBatch, direction: Direction): void {
    const l2 = this.l2.get(direction)!;
    this.seen[direction] += b.count;
    for (let i = 0; i < b.count; i++) {
      const m = i * PCAP_META_WORDS;
      const h = parseHeaders(b.data, b.meta[m + 4]!, b.meta[m + 2]!, l2);
      if (!h) continue;
      for (const c of classify(h, direction, this.index)) {
        const key = `${c.target.toString('hex')}|${c.port}|${c.proto}|${c.kind}`;
        let s = this.samples.get(key);
        if (!s) {
          const proto = PROTO_NAMES.get(c.proto)!;
          s = { ...c, target: formatAddress16(c.target), proto, packets: 0, bytes: 0 };
          this.samples.set(key, s);
        }
        s.packets += 1;
        s.bytes += b.meta[m + 3]!;
      }
    }
  }

  private drainAll(): void {
    for (const r of this.readers.values()) r.drain();
  }

  read(): CounterReading {
    if (this.closed) throw new Error('pcap counter already closed');
    this.drainAll();
    const drops = { counterMapFull: 0, captureBuffer: 0, interface: 0 };
    for (const r of this.readers.values()) {
      const stats = r.stats();
      drops.captureBuffer += stats.dropped;
      drops.interface += stats.interfaceDropped;
    }
    return {
      backend: 'pcap',
      counters: [...this.samples.values()].map((s) => ({ ...s })),
      seen: { ...this.seen },
      drops,
    };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const r of this.readers.values()) r.close();
  }
}
