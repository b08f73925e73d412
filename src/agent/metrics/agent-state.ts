// What /metrics reads of the agent at each scrape.
import type { Counter } from '../../capture/counter.js';
import type { Finding } from '../../detect/types.js';
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
  /** The significant findings of the last diagnosis. */
  findings: readonly Finding[];
}
