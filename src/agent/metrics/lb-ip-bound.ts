// Whether LB ingress IPs are bound on kube-ipvs0: for the node, and per IP for active ports only.
// Without the addresses source binding is unknown, so there are no series rather than zeros.
import { Gauge } from 'prom-client';
import type { AddressSnapshot } from '../../kernel/types.js';
import type { ServiceIndex } from '../service-index.js';
import type { Collector } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

/** Per-IP series per Service port: a Service may list many ingress IPs. */
const MAX_IPS_PER_PORT = 4;

const lbIpCounts = new WeakMap<ServiceIndex, { bound: number; unbound: number }>();

/**
 * The index's LB ingress IPs, bound on kube-ipvs0 or not: counted once per index (it is rebuilt
 * when the addresses change).
 */
function lbIpsOf(index: ServiceIndex): { bound: number; unbound: number } {
  let counts = lbIpCounts.get(index);
  if (!counts) {
    const ips = new Set(index.services.flatMap((s) => s.lbIngress.map((i) => i.ip)));
    const bound = [...ips].filter((ip) => index.isIpvsBound(ip)).length;
    counts = { bound, unbound: ips.size - bound };
    lbIpCounts.set(index, counts);
  }
  return counts;
}

export const lbIpBound: Collector = {
  register(registry, scrape) {
    new Gauge({
      name: 'clbprobe_lb_ips',
      help: 'LB ingress IPs of the followed Service ports, by whether they are bound on kube-ipvs0 on this node.',
      labelNames: ['bound'],
      registers: [registry],
      collect() {
        this.reset();
        const { index, sources } = scrape().agent;
        if (!sources.value<AddressSnapshot>('addresses')) return;
        const { bound, unbound } = lbIpsOf(index);
        this.set({ bound: 'true' }, bound);
        this.set({ bound: 'false' }, unbound);
      },
    });
    new Gauge({
      name: 'clbprobe_lb_ip_bound',
      help:
        'Whether an LB ingress IP of an active Service port is ' +
        'bound on kube-ipvs0 on this node (at most 4 IPs per port).',
      labelNames: [...PORT_LABELS, 'ip'],
      registers: [registry],
      collect() {
        this.reset();
        const { agent, servicePorts } = scrape();
        if (!agent.sources.value<AddressSnapshot>('addresses')) return;
        for (const port of servicePorts.ports) {
          for (const { ip } of port.view?.lbIngress.slice(0, MAX_IPS_PER_PORT) ?? [])
            this.set({ ...port.labels, ip }, agent.index.isIpvsBound(ip) ? 1 : 0);
        }
      },
    });
  },
};
