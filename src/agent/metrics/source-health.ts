// Every source's health, resyncs, errors and read duration as the runner records them, for new sources too.
import { type AgentState, type Family, families, type Sample } from './collector.js';

function perSource(
  type: 'counter' | 'gauge',
  name: string,
  help: string,
  values: (agent: AgentState) => Iterable<[string, number]>,
): Family {
  return {
    type,
    name,
    help,
    labelNames: ['source'],
    samples: ({ agent }) => [...values(agent)].map(([source, value]): Sample => [{ source }, value]),
  };
}

export const sourceHealth = families(
  perSource(
    'gauge',
    'clbprobe_source_up',
    'Whether a datapath or cluster source was read successfully (1) or is failing (0).',
    (a) => a.sources.health.list().map((s) => [s.source, s.up ? 1 : 0]),
  ),
  perSource('gauge', 'clbprobe_source_duration_seconds', 'How long the last read of a source took.', (a) =>
    Object.entries(a.sources.durations),
  ),
  perSource('counter', 'clbprobe_resyncs_total', 'Full re-reads of a source (periodic, or after lost events).', (a) =>
    Object.entries(a.sources.health.resyncs),
  ),
  perSource('counter', 'clbprobe_errors_total', 'Failed reads or updates, by source.', (a) =>
    Object.entries(a.sources.health.errors),
  ),
);
