// LB-path packet and byte counters of active ports, read from eBPF (or pcap) at every scrape; to_lb and loop_return
// show even at 0 so the first looped packet is an increase Prometheus sees.
import { Counter } from 'prom-client';
import type { Collector } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

const HELP = {
  packets:
    'Packets on the LB path by kind: to_lb (local source to an LB VIP), loop_return (local ' +
    'source back in from the uplink), hc_local_src (LB health checks with a node-bound source).',
  bytes: 'Bytes on the LB path by kind (see clbprobe_lb_path_packets_total).',
};

export const lbPath: Collector = {
  register(registry, scrape) {
    for (const unit of ['packets', 'bytes'] as const) {
      new Counter({
        name: `clbprobe_lb_path_${unit}_total`,
        help: HELP[unit],
        labelNames: [...PORT_LABELS, 'kind'],
        registers: [registry],
        collect() {
          this.reset();
          for (const port of scrape().servicePorts.ports) {
            for (const [kind, count] of port.lbPath) {
              if (kind === 'hc_local_src' && count.packets === 0) continue;
              this.inc({ ...port.labels, kind }, count[unit]);
            }
          }
        },
      });
    }
  },
};
