// A collector, as in node_exporter: one file declares its metrics, each callback reads the per-request scrape.
import { Counter, Gauge } from 'prom-client';
import type { MetricsCollector } from '../../export/metrics.js';
import type { AgentState } from './agent-state.js';
import type { ServicePortSeries, ServicePortValues } from './service-ports.js';

export type { AgentState } from './agent-state.js';

/** One scrape: the agent's state, and the Service ports that have series now. */
export interface Scrape {
  agent: AgentState;
  servicePorts: ReturnType<ServicePortSeries['scrape']>;
}

export type Collector = MetricsCollector<Scrape>;

export type Sample = [labels: Record<string, string | number>, value: number];

/** One metric family whose series are all replaced by `samples` at each scrape. */
export interface Family {
  type: 'counter' | 'gauge';
  name: string;
  help: string;
  labelNames?: readonly string[];
  samples(scrape: Scrape): Iterable<Sample>;
}

/** A collector of these families, registered in this order. */
export function families(...list: Family[]): Collector {
  return {
    register(registry, scrape) {
      for (const { type, name, help, labelNames = [], samples } of list) {
        const config = {
          name,
          help,
          labelNames,
          registers: [registry],
          collect(this: Counter | Gauge) {
            this.reset();
            // A counter takes its total with inc() after the reset, a gauge its value with set().
            const put = this instanceof Gauge ? this.set.bind(this) : this.inc.bind(this);
            for (const [labels, value] of samples(scrape())) put(labels, value);
          },
        };
        if (type === 'counter') new Counter(config);
        else new Gauge(config);
      }
    },
  };
}

/** Each active Service port's values of one kind, as samples labelled with the port and `label`. */
export function perPort(
  scrape: Scrape,
  label: string,
  values: (port: ServicePortValues) => Iterable<[string, number]>,
): Sample[] {
  const samples: Sample[] = [];
  for (const port of scrape.servicePorts.ports) {
    for (const [value, n] of values(port)) samples.push([{ ...port.labels, [label]: value }, n]);
  }
  return samples;
}
