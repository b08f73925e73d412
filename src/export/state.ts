// What the exporter renders: a plain snapshot of the agent's state, so that
// /metrics is a pure function of it (the golden test feeds a fixed one).
// Counters are cumulative values kept by the agent; the exporter only prints.

/**
 * The per-Service labels: one series set per Service port. Read-only: the exporter caches each
 * object's label text by identity, so pass the same object for a Service port at every scrape
 * (labelsOf in src/agent/service-index.ts does) and never change one after handing it over.
 */
export interface SvcPortLabels {
  namespace: string;
  service: string;
  port: string;
  protocol: string;
}

export type LbPathKind = 'to_lb' | 'loop_return' | 'hc_local_src';
import type { FlowOutcome } from '../model/flow.js';

export type { FlowOutcome };

/**
 * The per-Service lists may be the same arrays from one scrape to the next (the agent reuses them
 * while nothing changed), and the exporter then skips looking at their Service ports again: a list
 * whose items change which Service ports it holds must be a new array. Values may change in place.
 */
export interface ExportState {
  nodeName: string;
  version: string;
  /** Each source's health (clbprobe_source_up). */
  sources: { source: string; up: boolean }[];
  resyncs: Record<string, number>;
  errors: Record<string, number>;
  /** Each source's last read, in seconds (clbprobe_source_duration_seconds). */
  sourceDurations: Record<string, number>;
  lbPath: { svc: SvcPortLabels; kind: LbPathKind; packets: number; bytes: number }[];
  flows: { svc: SvcPortLabels; outcome: FlowOutcome; count: number }[];
  findings: { svc: SvcPortLabels; mechanism: string; severity: string }[];
  lbIpBound: { svc: SvcPortLabels; ip: string; bound: boolean }[];
  ipvsRealServers: { svc: SvcPortLabels; locality: 'local' | 'remote'; count: number }[];
  conntrackEntries: { svc: SvcPortLabels; state: string; count: number }[];
}

export function emptyState(nodeName: string, version: string): ExportState {
  return {
    nodeName,
    version,
    sources: [],
    resyncs: {},
    errors: {},
    sourceDurations: {},
    lbPath: [],
    flows: [],
    findings: [],
    lbIpBound: [],
    ipvsRealServers: [],
    conntrackEntries: [],
  };
}
