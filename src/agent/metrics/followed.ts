// How much the agent follows: indexed LB Service ports, kept (and refused) conntrack entries, ports with series.
import { families } from './collector.js';

export const followed = families(
  {
    type: 'gauge',
    name: 'clbprobe_service_ports_followed',
    help: 'Service ports with an LB ingress IP or behind an Ingress VIP, which the agent follows.',
    samples: (s) => [[{}, s.agent.index.services.length]],
  },
  {
    type: 'gauge',
    name: 'clbprobe_service_ports_active',
    help:
      'Service ports this node has something to say about (packets, ' +
      'conntrack entries or flows, findings): those with per-Service series.',
    samples: (s) => [[{}, s.servicePorts.active]],
  },
  {
    type: 'gauge',
    name: 'clbprobe_conntrack_entries_kept',
    help: 'Conntrack entries the agent keeps: those towards, or back from, a followed Service port.',
    samples: (s) => [[{}, s.agent.table.size]],
  },
  {
    type: 'counter',
    name: 'clbprobe_conntrack_entries_dropped_total',
    help: 'Conntrack entries of a followed Service port refused because the kept ones reached the cap (100,000).',
    samples: (s) => [[{}, s.agent.table.dropped]],
  },
  {
    type: 'counter',
    name: 'clbprobe_series_dropped_total',
    help: 'Active Service ports left without series because of the cap (--max-service-ports).',
    samples: (s) => [[{}, s.servicePorts.droppedTotal]],
  },
);
