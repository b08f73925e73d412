// A collector, as in node_exporter: one file declares its metrics, each callback reads the per-request scrape.
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
