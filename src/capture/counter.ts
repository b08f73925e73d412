// The choice between the counter backends (their interface: counter-types.ts).

import { errText } from '../errors.js';
import type { Counter, CounterOptions } from './counter-types.js';
import { EbpfCounter } from './ebpf.js';
import { CaptureError } from './errors.js';
import { PcapCounter } from './pcap-counter.js';

export type { Counter, CounterOptions } from './counter-types.js';

/** Opens the requested backend; 'auto' (default) falls back from eBPF to pcap, logging why. */
export function openCounter(opts: CounterOptions): Counter {
  const backend = opts.backend ?? 'auto';
  if (backend === 'ebpf') return EbpfCounter.open(opts);
  if (backend === 'pcap') return PcapCounter.open(opts);
  let ebpfError: unknown;
  try {
    return EbpfCounter.open(opts);
  } catch (e) {
    ebpfError = e;
    opts.logger?.warn({ reason: errText(e) }, 'eBPF counters unavailable; falling back to pcap');
  }
  try {
    const pcap = PcapCounter.open(opts);
    pcap.fallbackReason = `counting with pcap (more CPU per packet): eBPF unavailable: ${errText(ebpfError)}`;
    return pcap;
  } catch (e) {
    const code = e instanceof CaptureError ? e.code : 'EUNKNOWN';
    throw new CaptureError(
      `no counter backend can run: eBPF: ${errText(ebpfError)}; pcap: ${errText(e)}`,
      code,
      'pcap',
    );
  }
}
