// A collector, after node_exporter's: one file declares its metric families and
// fills its part of the export state from what the agent holds. The registry
// renders the families of every collector in list.ts; the export state's type,
// its empty value and the cardinality cap's per-Service lists all follow from
// that list.
import type { Counter } from '../../capture/counter.js';
import type { Finding } from '../../detect/types.js';
import type { FamilyDecl } from '../../export/family.js';
import type { SourceRunner } from '../../source/runner.js';
import type { ConntrackTable } from '../conntrack-table.js';
import type { ServiceIndex } from '../service-index.js';

/** What the collectors read: the agent's current state, handed over at each scrape. */
export interface AgentState {
  nodeName: string;
  version: string;
  /** Every source's values, health, durations, resyncs and errors. */
  sources: SourceRunner;
  /** The LB Service ports the agent follows, and which addresses are this node's. */
  index: ServiceIndex;
  /** The LB-path counters; undefined when capture is off or failed. */
  counter: Counter | undefined;
  /** Told after each scrape's read of the counters why they count nothing now (undefined: they count). */
  captureRead: (down: string | undefined) => void;
  table: ConntrackTable;
  /** The significant findings of the last diagnosis (a new array whenever they change). */
  findings: readonly Finding[];
}

export interface Collector<P extends object> {
  /** Its families, in the order /metrics lists them. */
  readonly families: readonly FamilyDecl<P>[];
  /** Its part of a state with nothing in it. */
  empty(): P;
  /**
   * A fill function for one agent, called at every scrape. It may keep what it built while its
   * inputs are the same objects (a scrape then allocates nothing for it); per-Service lists must
   * be new arrays when the Service ports they hold change (src/export/state.ts).
   */
  filler(): (from: AgentState) => P;
}
