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
    let counts: LbPathCounts | undefined;
    const empty: LbPathItem[] = [];
    /**
     * Every Service port and kind present, at 0 when nothing was counted, so that "no loop" is a
     * value, not an absence. The counts live as long as the index: a scrape zeroes and refills them.
     */
    const fill = (idx: ServiceIndex, counter: Counter, report: (down: string | undefined) => void): LbPathItem[] => {
      if (counts?.index !== idx) counts = new LbPathCounts(idx);
      let read: CounterReading['counters'];
      try {
        read = counter.read().counters;
      } catch (e) {
        // Unknown is not zero: the last scrape's values stay (zeros would read as a counter reset).
        report(`reading counters: ${errText(e)}`);
        return counts.items;
      }
      counts.packets.fill(0);
      counts.bytes.fill(0);
      for (const c of read) {
        const k = KINDS.indexOf(c.kind);
        if (k < 0) continue;
        for (const s of idx.ofSample(c)) {
          const at = counts.first.get(s);
          if (at === undefined) continue;
          counts.packets[at + k]! += c.packets;
          counts.bytes[at + k]! += c.bytes;
        }
      }
      // What was counted until the capture stopped is still true: shown, with the source down.
      report(counter.stopped);
      return counts.items;
    };
    return (a: AgentState) => ({ lbPath: a.counter ? fill(a.index, a.counter, a.captureRead) : empty });
  },
};

/**
 * The LB-path counts of an index's Service ports: KINDS.length slots per Service port, in KINDS
 * order, from the Service port's `first`, in two Float64Arrays. The items the families read are
 * views of a slot (a reference and an index: 40 bytes), not objects holding the counts: at 6,667
 * Service ports those were 20k objects of 56 bytes plus a 16-byte box per count (V8 boxes a double
 * in an object field), 1.76 MB in a heap snapshot; the views and arrays are 0.80 + 0.32 MB.
 */
class LbPathCounts {
  readonly first = new Map<ServiceView, number>();
  readonly svcs: SvcPortLabels[];
  readonly packets: Float64Array;
  readonly bytes: Float64Array;
  readonly items: LbPathItem[];
  constructor(readonly index: ServiceIndex) {
    this.svcs = index.services.map(labelsOf);
    index.services.forEach((s, i) => this.first.set(s, i * KINDS.length));
    this.packets = new Float64Array(this.svcs.length * KINDS.length);
    this.bytes = new Float64Array(this.svcs.length * KINDS.length);
    const items: LbPathItem[] = [];
    for (let at = 0; at < this.packets.length; at++) items.push(new LbPathSlot(this, at));
    // At its exact size: push leaves up to a third of a list's capacity empty.
    this.items = items.slice();
  }
}

class LbPathSlot implements LbPathItem {
  constructor(
    private readonly counts: LbPathCounts,
    private readonly at: number,
  ) {}
  get svc(): SvcPortLabels {
    return this.counts.svcs[Math.floor(this.at / KINDS.length)]!;
  }
  get kind(): CounterKind {
    return KINDS[this.at % KINDS.length]!;
  }
  get packets(): number {
    return this.counts.packets[this.at]!;
  }
  get bytes(): number {
    return this.counts.bytes[this.at]!;
  }
}
