// Conntrack of active Service ports: ended VIP flows by outcome and open entries by state (conntrack-table.ts).
import { Counter, Gauge } from 'prom-client';
import type { Collector } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

export const conntrack: Collector = {
  register(registry, scrape) {
    new Counter({
      name: 'clbprobe_conntrack_flows_total',
      help: 'Conntrack flows towards LB VIPs that ended, by outcome (replied, unreplied, loopback_pair, not_snated).',
      labelNames: [...PORT_LABELS, 'outcome'],
      registers: [registry],
      collect() {
        this.reset();
        for (const port of scrape().servicePorts.ports)
          for (const [outcome, n] of port.flows) this.inc({ ...port.labels, outcome }, n);
      },
    });
    new Gauge({
      name: 'clbprobe_conntrack_entries',
      help: 'Conntrack entries towards the LB VIPs of a Service port, by state.',
      labelNames: [...PORT_LABELS, 'state'],
      registers: [registry],
      collect() {
        this.reset();
        for (const port of scrape().servicePorts.ports)
          for (const [state, n] of port.entries) this.set({ ...port.labels, state }, n);
      },
    });
  },
};
