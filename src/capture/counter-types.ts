// The counter backends' common interface, apart from the code that picks a
// backend, so that each backend can name it without importing the others.
import type { Logger } from '../log.js';
import type { AttachMode } from './attach.js';
import type { CaptureMode, CounterBackend, CounterReading, Targets } from './targets.js';

export interface Counter {
  readonly backend: CounterBackend;
  /** e.g. "eBPF (tcx) on eth0" */
  readonly description: string;
  /**
   * Set when this backend runs because the one asked for could not ('auto' fell back to pcap): why
   * eBPF did not run. The capture source is then up but degraded, and says so.
   */
  fallbackReason?: string;
  /**
   * Set while the counters count nothing: why (pcap: the interface was deleted, for good; eBPF: the
   * interface was deleted, until one of its name is back and the programs are attached to it, at a
   * read). The counts read keep what was counted until then; the capture source is down with this reason.
   */
  readonly stopped?: string;
  /** How many LB VIP:ports per address family the backend can count (eBPF: its maps' size); none: no bound. */
  readonly maxVipsPerFamily?: number;
  /** Replaces the target sets; takes effect at once, counting continues. */
  setTargets(targets: Targets): void;
  /** Cumulative counters since open. */
  read(): CounterReading;
  /** Detaches/stops capturing. Idempotent. */
  close(): void;
}

export interface CounterOptions {
  /** The uplink (the default-route interface unless configured). */
  ifname: string;
  /** Attach inside this network namespace instead of ours (tests, benchmarks). */
  netnsPath?: string;
  backend?: Exclude<CaptureMode, 'off'>;
  /** eBPF only: TCX, legacy cls_bpf, or TCX falling back to cls_bpf. */
  attach?: AttachMode | 'auto';
  /** pcap only: kernel capture buffer per direction (bytes). */
  pcapBufferSize?: number;
  logger?: Logger;
}
