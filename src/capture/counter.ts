// The counter backends' common interface and the choice between them.
import type { Logger } from '../log.js';
import type { AttachMode } from './attach.js';
import { EbpfCounter } from './ebpf.js';
import { CaptureError } from './errors.js';
import { PcapCounter } from './pcap-counter.js';
import type { CounterReading, Targets } from './targets.js';

export interface Counter {
  readonly backend: 'ebpf' | 'pcap';
  /** e.g. "eBPF (tcx) on eth0" */
  readonly description: string;
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
  backend?: 'auto' | 'ebpf' | 'pcap';
  /** eBPF only: TCX, legacy cls_bpf, or TCX falling back to cls_bpf. */
  attach?: AttachMode | 'auto';
  /** pcap only: kernel capture buffer per direction (bytes). */
  pcapBufferSize?: number;
  logger?: Logger;
}

/**
 * Opens the requested backend. 'auto' (default) uses eBPF and falls back to
 * pcap when eBPF cannot run, logging why.
 */
export function openCounter(opts: CounterOptions): Counter {
  const backend = opts.backend ?? 'auto';
  if (backend === 'ebpf') return EbpfCounter.open(opts);
  if (backend === 'pcap') return PcapCounter.open(opts);
  let ebpfError: unknown;
  try {
    return EbpfCounter.open(opts);
  } catch (e) {
    ebpfError = e;
    opts.logger?.warn({ reason: e instanceof Error ? e.message : String(e) }, 'eBPF counters unavailable; falling back to pcap');
  }
  try {
    return PcapCounter.open(opts);
  } catch (e) {
    const a = ebpfError instanceof Error ? ebpfError.message : String(ebpfError);
    const b = e instanceof Error ? e.message : String(e);
    throw new CaptureError(`no counter backend can run: eBPF: ${a}; pcap: ${b}`, e instanceof CaptureError ? e.code : 'EUNKNOWN', 'pcap');
  }
}
