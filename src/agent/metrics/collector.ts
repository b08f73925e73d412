// A collector, after node_exporter's: one file declares its metrics on the registry, and each
// metric's collect callback reads the scrape (taken once per /metrics request, src/export/metrics.ts).
import type { Registry } from 'prom-client';
import type { AgentState } from './agent-state.js';
import type { ServicePortsScrape } from './service-ports.js';

export type { AgentState } from './agent-state.js';

/** One scrape: the agent's state, and the Service ports that have series now. */
export interface Scrape {
  agent: AgentState;
  servicePorts: ServicePortsScrape;
}

export interface Collector {
  register(registry: Registry, scrape: () => Scrape): void;
}
