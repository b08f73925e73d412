// The conntrack entries towards each Service port's LB VIPs, by state, from
// the entries the agent keeps (src/agent/conntrack-table.ts).
import { perServicePort } from '../../export/family.js';
import type { SvcPortLabels } from '../../export/state.js';
import { labelsOf } from '../service-index.js';
import type { Collector } from './collector.js';

type EntriesItem = { svc: SvcPortLabels; state: string; count: number };

export interface ConntrackEntriesPart {
  conntrackEntries: EntriesItem[];
}

export const conntrackEntries: Collector<ConntrackEntriesPart> = {
  families: [
    perServicePort<ConntrackEntriesPart, EntriesItem>({
      name: 'clbprobe_conntrack_entries',
      help: 'Conntrack entries towards the LB VIPs of a Service port, by state.',
      type: 'gauge',
      items: (s) => s.conntrackEntries,
      extra: [['state', (x) => x.state]],
      value: (x) => x.count,
    }),
  ],
  empty: () => ({ conntrackEntries: [] }),
  filler: () => {
    // Counted again only when the table changed since the last scrape: between events a scrape
    // allocates none of the items and per-Service maps, which at 5,000 Services would be most
    // of a scrape's garbage.
    let cache: { changes: number; part: ConntrackEntriesPart } | undefined;
    return ({ table }) => {
      if (cache?.changes === table.changes) return cache.part;
      const states = new Map<SvcPortLabels, Map<string, EntriesItem>>();
      for (const k of table.entries()) {
        if (!k.toVip) continue;
        const state = k.entry.tcpState ?? (k.entry.statusFlags.includes('SEEN_REPLY') ? 'REPLIED' : 'UNREPLIED');
        for (const s of k.svcs) {
          const svc = labelsOf(s);
          let byState = states.get(svc);
          if (!byState) states.set(svc, (byState = new Map()));
          const x = byState.get(state);
          if (x) x.count++;
          else byState.set(state, { svc, state, count: 1 });
        }
      }
      const list: EntriesItem[] = [];
      for (const byState of states.values()) list.push(...byState.values());
      cache = { changes: table.changes, part: { conntrackEntries: list } };
      return cache.part;
    };
  },
};
