// The choice between the counter backends (their interface: counter-types.ts).
import type { Counter, CounterOptions } from './counter-types.js';
import { EbpfCounter } from './ebpf.js';
import { CaptureError } from './errors.js';
import { PcapCounter } from './pcap-counter.js';

export type { Counter, CounterOptions } from './counter-types.js';

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
    opts.logger?.warn(
      { reason: e instanceof Error ? e.message : String(e) },
      'eBPF counters unavailable; falling back to pcap',
    );
  }
  try {
    const pcap = PcapCounter.open(opts);
    pcap.fallbackReason = `counting with pcap (more CPU per packet): eBPF unavailable: ${ebpfError instanceof Error ? ebpfError.message : String(ebpfError)}`;
    return pcap;
  } catch (e) {
    const a = ebpfError instanceof Error ? ebpfError.message : String(ebpfError);
    const b = e instanceof Error ? e.message : String(e);
    throw new CaptureError(
      `no counter backend can run: eBPF: ${a}; pcap: ${b}`,
      e instanceof CaptureError ? e.code : 'EUNKNOWN',
      'pcap',
    );
  }
}
