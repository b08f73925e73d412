// Every collector of /metrics, in the order the families are listed. A new
// metric is a collector file in this folder (its families and how it fills
// them) and one entry here: the export state's type, its empty value, the
// registry and the cardinality cap's per-Service lists all follow from it.
import type client from 'prom-client';
import type { FamilyDecl } from '../../export/family.js';
import { createFamilyRegistry, type MetricsOptions } from '../../export/metrics.js';
import { buildInfo } from './build-info.js';
import type { AgentState, Collector } from './collector.js';
import { conntrackEntries } from './conntrack-entries.js';
import { findings } from './findings.js';
import { flows } from './flows.js';
import { followed } from './followed.js';
import { ipvsRealServers } from './ipvs-real-servers.js';
import { lbIpBound } from './lb-ip-bound.js';
import { lbPath } from './lb-path.js';
import { sourceHealth } from './source-health.js';

export const COLLECTORS = [buildInfo, sourceHealth, lbPath, flows, findings, lbIpBound, ipvsRealServers, conntrackEntries, followed] as const;

type PartOf<C> = C extends Collector<infer P> ? P : never;
type Intersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;

/** What /metrics renders: every collector's part. */
export type ExportState = Intersection<PartOf<(typeof COLLECTORS)[number]>>;

export function emptyState(nodeName: string, version: string): ExportState {
  const st = Object.assign({}, ...COLLECTORS.map((c) => c.empty())) as ExportState;
  st.nodeName = nodeName;
  st.version = version;
  return st;
}

const FAMILIES: readonly FamilyDecl<ExportState>[] = COLLECTORS.flatMap((c): readonly FamilyDecl<ExportState>[] => c.families);

/** The /metrics registry of the agent's families (and prom-client's process metrics when asked). */
export function createRegistry(getState: () => ExportState, opts: MetricsOptions): client.Registry {
  return createFamilyRegistry(FAMILIES, getState, opts);
}

/** Fills an export state from the agent at each scrape, with one filler (and its caches) per collector. */
export function exportStateBuilder(): (from: AgentState) => ExportState {
  const fillers = COLLECTORS.map((c) => c.filler() as (from: AgentState) => object);
  return (from) => {
    const st = {} as ExportState;
    for (const fill of fillers) Object.assign(st, fill(from));
    return st;
  };
}
