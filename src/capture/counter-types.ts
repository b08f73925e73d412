// The counter backends' common interface, apart from the backend choice so each backend can name it alone.
import type { Logger } from '../log.js';
import type { AttachMode } from './attach.js';
import type { CaptureMode, CounterBackend, CounterReading, Targets } from './targets.js';

export interface Counter {
  readonly backend: CounterBackend;
  /** e.g. "eBPF (tcx) on eth0" */
  readonly description: string;
  /** Why eBPF did not run when 'auto' fell back to pcap; the capture source is then up but degraded. */
  fallbackReason?: string;
  /** Why nothing is counted now (interface deleted; eBPF resumes on a new one of its name); counts so far are kept. */
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
