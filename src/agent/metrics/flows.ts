// Finished conntrack flows towards LB VIPs by outcome, from the counts the
// conntrack table keeps (src/agent/conntrack-table.ts).
import { perServicePort } from '../../export/family.js';
import type { SvcPortLabels } from '../../export/state.js';
import { FLOW_OUTCOMES, type FlowOutcome } from '../../model/flow.js';
import type { Collector } from './collector.js';

type FlowItem = { svc: SvcPortLabels; outcome: FlowOutcome; count: number };

export interface FlowsPart {
  flows: FlowItem[];
}

export const flows: Collector<FlowsPart> = {
  families: [
    perServicePort<FlowsPart, FlowItem>({
      name: 'clbprobe_conntrack_flows_total',
      help: 'Conntrack flows towards LB VIPs that ended, by outcome (replied, unreplied, loopback_pair, not_snated).',
      type: 'counter',
      items: (s) => s.flows,
      extra: [['outcome', (x) => x.outcome]],
      value: (x) => x.count,
    }),
  ],
  empty: () => ({ flows: [] }),
  filler: () => {
    // Made again only when the table changed (an event, a re-dump, a new index) since the last
    // scrape: between events a scrape allocates none of these items.
    let cache: { changes: number; part: FlowsPart } | undefined;
    return ({ table }) => {
      if (cache?.changes === table.changes) return cache.part;
      const list: FlowItem[] = [];
      for (const counts of table.outcomes.values()) {
        for (const outcome of FLOW_OUTCOMES) if (counts[outcome] > 0) list.push({ svc: counts.svc, outcome, count: counts[outcome] });
      }
      cache = { changes: table.changes, part: { flows: list } };
      return cache.part;
    };
  },
};
