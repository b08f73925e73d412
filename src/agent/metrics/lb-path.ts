// The LB-path packet and byte counters of each Service port, read from the
// eBPF (or pcap) counters at every scrape, so /metrics is never older than it.
import type { Counter } from '../../capture/counter.js';
import type { CounterKind, CounterReading } from '../../capture/targets.js';
import type { ServiceView } from '../../cluster/types.js';
import { perServicePort } from '../../export/family.js';
import type { SvcPortLabels } from '../../export/state.js';
import { errText } from '../../source/contract.js';
import { labelsOf, type ServiceIndex } from '../service-index.js';
import type { AgentState, Collector } from './collector.js';

type LbPathItem = { svc: SvcPortLabels; kind: CounterKind; packets: number; bytes: number };

export interface LbPathPart {
  lbPath: LbPathItem[];
}

/** The kinds every Service port has a series of, in this order. */
const KINDS: readonly CounterKind[] = ['to_lb', 'loop_return', 'hc_local_src'];

const HELP = {
  packets:
    'Packets on the LB path by kind: to_lb (local source to an LB VIP), loop_return (local source back in from the uplink), hc_local_src (LB health checks with a node-bound source).',
  bytes: 'Bytes on the LB path by kind (see clbprobe_lb_path_packets_total).',
};

export const lbPath: Collector<LbPathPart> = {
  families: (['packets', 'bytes'] as const).map((unit) =>
    perServicePort<LbPathPart, LbPathItem>({
      name: `clbprobe_lb_path_${unit}_total`,
      help: HELP[unit],
      type: 'counter',
      items: (s) => s.lbPath,
      extra: [['kind', (x) => x.kind]],
      value: (x) => x[unit],
    }),
  ),
  empty: () => ({ lbPath: [] }),
  filler: () => {
    /** The slots: KINDS.length per Service port, in KINDS order, from the Service port's `first`. */
    let slots: { index: ServiceIndex; first: Map<ServiceView, number>; all: LbPathItem[] } | undefined;
    const empty: LbPathItem[] = [];
    /**
     * One slot per Service port and kind, every one present at 0 so that "no loop" is a value, not
     * an absence. The slots live as long as the index: a scrape zeroes and refills them instead of
     * allocating 20k objects at 5,000 Services.
     */
    const fill = (idx: ServiceIndex, counter: Counter, report: (down: string | undefined) => void): LbPathItem[] => {
      if (slots?.index !== idx) {
        const first = new Map<ServiceView, number>();
        const all: LbPathItem[] = [];
        for (const s of idx.services) {
          const svc = labelsOf(s);
          first.set(s, all.length);
          for (const kind of KINDS) all.push({ svc, kind, packets: 0, bytes: 0 });
        }
        slots = { index: idx, first, all: all.slice() };
      }
      const { first, all } = slots;
      let counters: CounterReading['counters'];
      try {
        counters = counter.read().counters;
      } catch (e) {
        // Unknown is not zero: the last scrape's values stay (zeros would read as a counter reset).
        report(`reading counters: ${errText(e)}`);
        return all;
      }
      for (const x of all) x.packets = x.bytes = 0;
      for (const c of counters) {
        const k = KINDS.indexOf(c.kind);
        if (k < 0) continue;
        for (const s of idx.ofSample(c)) {
          const at = first.get(s);
          if (at === undefined) continue;
          const x = all[at + k]!;
          x.packets += c.packets;
          x.bytes += c.bytes;
        }
      }
      // What was counted until the capture stopped is still true: shown, with the source down.
      report(counter.stopped);
      return all;
    };
    return (a: AgentState) => ({ lbPath: a.counter ? fill(a.index, a.counter, a.captureRead) : empty });
  },
};
