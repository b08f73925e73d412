// How much the agent follows: indexed LB Service ports, kept conntrack entries, and Service ports with series.
import { Counter, Gauge } from 'prom-client';
import type { Collector, Scrape } from './collector.js';

const GAUGES: { name: string; help: string; value: (s: Scrape) => number }[] = [
  {
    name: 'clbprobe_service_ports_followed',
    help: 'Service ports with an LB ingress IP or behind an Ingress VIP, which the agent follows.',
    value: (s) => s.agent.index.services.length,
  },
  {
    name: 'clbprobe_service_ports_active',
    help:
      'Service ports this node has something to say about (packets, ' +
      'conntrack entries or flows, findings): those with per-Service series.',
    value: (s) => s.servicePorts.active,
  },
  {
    name: 'clbprobe_conntrack_entries_kept',
    help: 'Conntrack entries the agent keeps: those towards, or back from, a followed Service port.',
    value: (s) => s.agent.table.size,
  },
];

export const followed: Collector = {
  register(registry, scrape) {
    for (const { name, help, value } of GAUGES) {
      new Gauge({
        name,
        help,
        registers: [registry],
        collect() {
          this.set(value(scrape()));
        },
      });
    }
    new Counter({
      name: 'clbprobe_series_dropped_total',
      help: 'Active Service ports left without series because of the cap (--max-service-ports).',
      registers: [registry],
      collect() {
        this.reset();
        this.inc(scrape().servicePorts.droppedTotal);
      },
    });
  },
};
