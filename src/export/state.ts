// What the exporter reads: a plain state object per scrape, so that /metrics
// is a pure function of it (the golden tests feed fixed ones). Its shape is
// the collectors' (src/agent/metrics/): each fills its part. Counters are
// cumulative values kept by the agent; the exporter only prints.
//
// The per-Service lists may be the same arrays from one scrape to the next
// (the collectors reuse them while nothing changed), and the exporter then
// skips looking at their Service ports again: a list whose items change which
// Service ports it holds must be a new array. Values may change in place.

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
