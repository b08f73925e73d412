// Conntrack of active Service ports: ended VIP flows by outcome and open entries by state (conntrack-table.ts).
import { families, perPort } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

export const conntrack = families(
  {
    type: 'counter',
    name: 'clbprobe_conntrack_flows_total',
    help: 'Conntrack flows towards LB VIPs that ended, by outcome (replied, unreplied, loopback_pair, not_snated).',
    labelNames: [...PORT_LABELS, 'outcome'],
    samples: (scrape) => perPort(scrape, 'outcome', (port) => port.flows),
  },
  {
    type: 'gauge',
    name: 'clbprobe_conntrack_entries',
    help: 'Conntrack entries towards the LB VIPs of a Service port, by state.',
    labelNames: [...PORT_LABELS, 'state'],
    samples: (scrape) => perPort(scrape, 'state', (port) => port.entries),
  },
);
