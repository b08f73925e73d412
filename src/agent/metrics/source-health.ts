// Every source's health, resyncs, errors and read duration, as the source
// runner (src/source/runner.ts) records them for all sources alike: a new
// source in src/source/list.ts gets these series without a line here.
import { label, perSource, plain } from '../../export/family.js';
import type { Collector } from './collector.js';

export interface SourceHealthPart {
  /** Each source's health (clbprobe_source_up). */
  sources: { source: string; up: boolean }[];
  resyncs: Record<string, number>;
  errors: Record<string, number>;
  /** Each source's last read, in seconds (clbprobe_source_duration_seconds). */
  sourceDurations: Record<string, number>;
}

export const sourceHealth: Collector<SourceHealthPart> = {
  families: [
    plain<SourceHealthPart, SourceHealthPart['sources'][number]>({
      name: 'clbprobe_source_up',
      help: 'Whether a datapath or cluster source was read successfully (1) or is failing (0).',
      type: 'gauge',
      labelNames: ['source'],
      items: (s) => s.sources,
      key: (x) => x.source,
      labels: (x) => label('source', x.source),
      value: (x) => (x.up ? 1 : 0),
    }),
    perSource<SourceHealthPart>({ name: 'clbprobe_resyncs_total', help: 'Full re-reads of a source (periodic, or after lost events).', type: 'counter', counts: (s) => s.resyncs }),
    perSource<SourceHealthPart>({ name: 'clbprobe_errors_total', help: 'Failed reads or updates, by source.', type: 'counter', counts: (s) => s.errors }),
    perSource<SourceHealthPart>({
      name: 'clbprobe_source_duration_seconds',
      help: 'How long the last read of a source took.',
      type: 'gauge',
      counts: (s) => s.sourceDurations,
    }),
  ],
  empty: () => ({ sources: [], resyncs: {}, errors: {}, sourceDurations: {} }),
  filler: () => (a) => {
    const h = a.sources.health;
    return { sources: h.list(), resyncs: { ...h.resyncs }, errors: { ...h.errors }, sourceDurations: { ...a.sources.durations } };
  },
};
