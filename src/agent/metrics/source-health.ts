// Every source's health, resyncs, errors and read duration as the runner records them, for new sources too.
import { Counter, Gauge } from 'prom-client';
import type { AgentState, Collector } from './collector.js';

type Values = (agent: AgentState) => Iterable<[string, number]>;

const GAUGES: { name: string; help: string; values: Values }[] = [
  {
    name: 'clbprobe_source_up',
    help: 'Whether a datapath or cluster source was read successfully (1) or is failing (0).',
    values: (a) => a.sources.health.list().map((s) => [s.source, s.up ? 1 : 0]),
  },
  {
    name: 'clbprobe_source_duration_seconds',
    help: 'How long the last read of a source took.',
    values: (a) => Object.entries(a.sources.durations),
  },
];

const COUNTERS: { name: string; help: string; values: Values }[] = [
  {
    name: 'clbprobe_resyncs_total',
    help: 'Full re-reads of a source (periodic, or after lost events).',
    values: (a) => Object.entries(a.sources.health.resyncs),
  },
  {
    name: 'clbprobe_errors_total',
    help: 'Failed reads or updates, by source.',
    values: (a) => Object.entries(a.sources.health.errors),
  },
];

export const sourceHealth: Collector = {
  register(registry, scrape) {
    for (const { name, help, values } of GAUGES) {
      new Gauge({
        name,
        help,
        labelNames: ['source'],
        registers: [registry],
        collect() {
          this.reset();
          for (const [source, value] of values(scrape().agent)) this.set({ source }, value);
        },
      });
    }
    for (const { name, help, values } of COUNTERS) {
      new Counter({
        name,
        help,
        labelNames: ['source'],
        registers: [registry],
        collect() {
          this.reset();
          for (const [source, value] of values(scrape().agent)) this.inc({ source }, value);
        },
      });
    }
  },
};
