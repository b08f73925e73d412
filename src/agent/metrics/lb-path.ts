// LB-path packet and byte counters of active ports, read from eBPF (or pcap) at every scrape; to_lb and loop_return
// show even at 0 so the first looped packet is an increase Prometheus sees.
import { type Family, families, type Sample } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

function lbPathFamily(unit: 'packets' | 'bytes', help: string): Family {
  return {
    type: 'counter',
    name: `clbprobe_lb_path_${unit}_total`,
    help,
    labelNames: [...PORT_LABELS, 'kind'],
    samples: ({ servicePorts }) => {
      const samples: Sample[] = [];
      for (const port of servicePorts.ports) {
        for (const [kind, count] of port.lbPath) {
          if (kind !== 'hc_local_src' || count.packets !== 0) samples.push([{ ...port.labels, kind }, count[unit]]);
        }
      }
      return samples;
    },
  };
}

export const lbPath = families(
  lbPathFamily(
    'packets',
    'Packets on the LB path by kind: to_lb (local source to an LB VIP), loop_return (local ' +
      'source back in from the uplink), hc_local_src (LB health checks with a node-bound source).',
  ),
  lbPathFamily('bytes', 'Bytes on the LB path by kind (see clbprobe_lb_path_packets_total).'),
);
