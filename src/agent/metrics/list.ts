// Every /metrics collector in output order; a new metric is a collector file here and one entry in this list.
import type { Registry } from 'prom-client';
import { createRegistry, type RegistryOptions } from '../../export/metrics.js';
import { buildInfo } from './build-info.js';
import type { AgentState, Scrape } from './collector.js';
import { conntrack } from './conntrack.js';
import { findings } from './findings.js';
import { followed } from './followed.js';
import { ipvsRealServers } from './ipvs-real-servers.js';
import { lbIpBound } from './lb-ip-bound.js';
import { lbPath } from './lb-path.js';
import { ServicePortSeries, type ServicePortsOptions } from './service-ports.js';
import { sourceHealth } from './source-health.js';

export const COLLECTORS = [
  buildInfo,
  sourceHealth,
  lbPath,
  conntrack,
  findings,
  lbIpBound,
  ipvsRealServers,
  followed,
] as const;

export type AgentMetricsOptions = RegistryOptions & Omit<ServicePortsOptions, 'idleMs'> & { idleMs?: number };

/** A Service port's series retire after an hour without news: beyond any rate() window of the alerts. */
export const DEFAULT_IDLE_MS = 3_600_000;

/** The /metrics registry of the agent: each scrape reads `agent()` once. */
export function createAgentRegistry(agent: () => AgentState, opts: AgentMetricsOptions): Registry {
  const servicePorts = new ServicePortSeries({ idleMs: DEFAULT_IDLE_MS, ...opts });
  return createRegistry<Scrape>(
    COLLECTORS,
    () => {
      const state = agent();
      return { agent: state, servicePorts: servicePorts.scrape(state) };
    },
    opts,
  );
}
