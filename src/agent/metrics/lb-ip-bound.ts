// Whether LB ingress IPs are bound on kube-ipvs0, for the node and per active port's IP; unknown binding has no series.
import type { AddressSnapshot } from '../../kernel/types.js';
import type { ServiceIndex } from '../service-index.js';
import { families, type Sample } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

/** Per-IP series per Service port: a Service may list many ingress IPs. */
const MAX_IPS_PER_PORT = 4;

const lbIpCounts = new WeakMap<ServiceIndex, { bound: number; unbound: number }>();

/** The index's LB ingress IPs, bound on kube-ipvs0 or not: counted once per index (rebuilt when addresses change). */
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

export const lbIpBound = families(
  {
    type: 'gauge',
    name: 'clbprobe_lb_ips',
    help: 'LB ingress IPs of the followed Service ports, by whether they are bound on kube-ipvs0 on this node.',
    labelNames: ['bound'],
    samples: ({ agent }) => {
      if (!agent.sources.value<AddressSnapshot>('addresses')) return [];
      const { bound, unbound } = lbIpsOf(agent.index);
      return [
        [{ bound: 'true' }, bound],
        [{ bound: 'false' }, unbound],
      ];
    },
  },
  {
    type: 'gauge',
    name: 'clbprobe_lb_ip_bound',
    help:
      'Whether an LB ingress IP of an active Service port is ' +
      'bound on kube-ipvs0 on this node (at most 4 IPs per port).',
    labelNames: [...PORT_LABELS, 'ip'],
    samples: ({ agent, servicePorts }) => {
      if (!agent.sources.value<AddressSnapshot>('addresses')) return [];
      return servicePorts.ports.flatMap((port) =>
        (port.view?.lbIngress.slice(0, MAX_IPS_PER_PORT) ?? []).map(
          ({ ip }): Sample => [{ ...port.labels, ip }, agent.index.isIpvsBound(ip) ? 1 : 0],
        ),
      );
    },
  },
);
