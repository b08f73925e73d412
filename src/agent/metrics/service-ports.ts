// Which Service ports have per-Service series and their values at one scrape: a port gets series once this node
// has something to say about it, and retires after `idleMs` unchanged (docs/metrics.md).
import type { CounterKind, CounterSample } from '../../capture/targets.js';
import type { ServiceView } from '../../cluster/types.js';
import { errText } from '../../errors.js';
import { FLOW_OUTCOMES, type FlowOutcome } from '../../model/flow.js';
import { portKey, type ServicePortLabels, servicePortLabels } from '../../model/service.js';
import type { AgentState } from './agent-state.js';

export const PORT_LABELS = ['namespace', 'service', 'port', 'protocol'] as const;

const COUNTER_KINDS: readonly CounterKind[] = ['to_lb', 'loop_return', 'hc_local_src'];

type PacketCount = Pick<CounterSample, 'packets' | 'bytes'>;

/** What one Service port's series say at a scrape. */
export interface ServicePortValues {
  labels: ServicePortLabels;
  /** Its view in the current index; undefined when only finished flows remain of it. */
  view: ServiceView | undefined;
  /** By counter kind; empty when nothing counts packets on this node. */
  lbPath: Map<CounterKind, PacketCount>;
  flows: Map<FlowOutcome, number>;
  /** Conntrack entries towards its VIPs, by state. */
  entries: Map<string, number>;
  findings: { mechanism: string; severity: string }[];
}

export interface ServicePortsOptions {
  /** At most this many Service ports get series; those with findings come first. */
  maxServicePorts: number;
  /** A Service port with nothing new for this long, and no finding or open entry, loses its series. */
  idleMs: number;
  now?: () => number;
}

/** What a scrape knows per Service port id (portKey), before deciding which ports get series. */
interface Facts {
  packets: Map<string, { view: ServiceView; byKind: Map<CounterKind, PacketCount> }>;
  flows: AgentState['table']['outcomes'];
  entries: Map<string, Map<string, number>>;
  findings: Map<string, AgentState['findings'][number][]>;
}

/** One kernel counter: its target, port, protocol, kind and direction. */
const counterKey = (s: CounterSample): string => `${s.kind}|${s.direction}|${s.proto}|${s.target}|${s.port}`;

const minus = (a: PacketCount, b: PacketCount): PacketCount => ({
  packets: a.packets - b.packets,
  bytes: a.bytes - b.bytes,
});

/** A kernel counter's last value and, per Service port it counts for, its value when it began to count for it. */
interface Attribution {
  kind: CounterKind;
  last: PacketCount;
  since: Map<string, { view: ServiceView; base: PacketCount }>;
}

/** Adds `count` to a Service port's count of `kind`. */
function addCount(packets: Facts['packets'], id: string, view: ServiceView, kind: CounterKind, count: PacketCount) {
  const port = packets.get(id) ?? { view, byKind: new Map<CounterKind, PacketCount>() };
  const sum = port.byKind.get(kind) ?? { packets: 0, bytes: 0 };
  port.byKind.set(kind, { packets: sum.packets + count.packets, bytes: sum.bytes + count.bytes });
  packets.set(id, port);
}

/** The sum of everything counted for a Service port: it moves whenever something new was seen. */
function activityOf(facts: Facts, id: string): number {
  let sum = 0;
  for (const c of facts.packets.get(id)?.byKind.values() ?? []) sum += c.packets;
  const flows = facts.flows.get(id);
  if (flows) for (const outcome of FLOW_OUTCOMES) sum += flows[outcome];
  return sum;
}

/** Conntrack entries towards each Service port's VIPs by state, recomputed only when the table changed. */
class EntriesByState {
  private changes = -1;
  private counts = new Map<string, Map<string, number>>();
  of(table: AgentState['table']): Map<string, Map<string, number>> {
    if (table.changes === this.changes) return this.counts;
    const counts = new Map<string, Map<string, number>>();
    for (const kept of table.entries()) {
      if (!kept.toVip) continue;
      const state =
        kept.entry.tcpState ??
        kept.entry.sctpState ??
        (kept.entry.statusFlags.includes('SEEN_REPLY') ? 'REPLIED' : 'UNREPLIED');
      for (const s of kept.svcs) {
        const id = portKey(s, s.protocol, s.port);
        const byState = counts.get(id) ?? new Map<string, number>();
        byState.set(state, (byState.get(state) ?? 0) + 1);
        counts.set(id, byState);
      }
    }
    this.changes = table.changes;
    this.counts = counts;
    return counts;
  }
}

type PortIds = { index: AgentState['index']; idOf: Map<ServiceView, string>; viewOf: Map<string, ServiceView> };

export class ServicePortSeries {
  /** When each Service port's activity last moved, with the value it had then. */
  private readonly lastMove = new Map<string, { activity: number; atMs: number }>();
  private readonly dropped = new Set<string>();
  private readonly entries = new EntriesByState();
  /** The last packet counts read, kept when a read fails: unknown is not zero. */
  private lastSamples: readonly CounterSample[] = [];
  /** By counterKey: a counter counts for a Service port only what it counted since it began to (a reused IP:port). */
  private readonly attributions = new Map<string, Attribution>();
  /** What counters counted for a Service port they no longer count for, so that its counts never go down. */
  private readonly retired: Facts['packets'] = new Map();
  private ids?: PortIds;
  private readonly now: () => number;

  constructor(private readonly opts: ServicePortsOptions) {
    this.now = opts.now ?? Date.now;
  }

  /** The ports with series; how many have something to say and how many the cap ever left out; why counters failed. */
  scrape(agent: AgentState) {
    const counterError = this.readCounters(agent);
    const facts = this.factsOf(agent);
    const nowMs = this.now();
    const active: string[] = [];
    const seen = new Set([
      ...facts.packets.keys(),
      ...facts.flows.keys(),
      ...facts.entries.keys(),
      ...facts.findings.keys(),
    ]);
    for (const id of seen) {
      const activity = activityOf(facts, id);
      if (activity > 0 && this.lastMove.get(id)?.activity !== activity)
        this.lastMove.set(id, { activity, atMs: nowMs });
      const recent = (this.lastMove.get(id)?.atMs ?? -Infinity) > nowMs - this.opts.idleMs;
      if (recent || facts.entries.has(id) || facts.findings.has(id)) active.push(id);
    }
    for (const id of this.lastMove.keys()) if (!seen.has(id)) this.lastMove.delete(id);
    // A port without series, and that no counter counts for, has no counter to keep from going down.
    const kept = new Set(active);
    for (const a of this.attributions.values()) for (const id of a.since.keys()) kept.add(id);
    for (const id of this.retired.keys()) if (!kept.has(id)) this.retired.delete(id);
    const ports = this.withinCap(active, facts).map((id) => this.valuesOf(id, facts, agent));
    return { ports, active: active.length, droppedTotal: this.dropped.size, ...(counterError ? { counterError } : {}) };
  }

  /** Reads the packet counters, keeping the last counts when a read fails; returns why they count nothing now. */
  private readCounters(agent: AgentState): string | undefined {
    if (!agent.counter) return undefined;
    let counterError: string | undefined;
    try {
      this.lastSamples = agent.counter.read().counters;
      counterError = agent.counter.stopped;
    } catch (e) {
      counterError = `reading counters: ${errText(e)}`;
    }
    agent.captureRead(counterError);
    return counterError;
  }

  private factsOf(agent: AgentState): Facts {
    const packets = this.countPackets(agent.index);
    const findings: Facts['findings'] = new Map();
    for (const f of agent.findings) {
      const id = portKey(f.service, f.port.protocol, f.port.port);
      findings.set(id, [...(findings.get(id) ?? []), f]);
    }
    return { packets, flows: agent.table.outcomes, entries: this.entries.of(agent.table), findings };
  }

  /** Packets per Service port: the retired counts plus what each counter counted since it began to count for it. */
  private countPackets(index: AgentState['index']): Facts['packets'] {
    const { idOf } = this.idsOf(index);
    const idOfView = (v: ServiceView): string => idOf.get(v) ?? portKey(v, v.protocol, v.port);
    const counted: [string, ServiceView, CounterKind, PacketCount][] = [];
    const present = new Set<string>();
    for (const sample of this.lastSamples) {
      // A zero count says nothing: most of the kernel's counters, one per VIP, are zero.
      if (sample.packets === 0) continue;
      const key = counterKey(sample);
      present.add(key);
      const last = { packets: sample.packets, bytes: sample.bytes };
      let a = this.attributions.get(key);
      // A counter that went down was opened again: it counts from zero.
      if (a && last.packets < a.last.packets) {
        this.retire(a);
        a = undefined;
      }
      // A counter new to the agent counted for its ports from its start; one seen before, from now on.
      const base = a ? last : { packets: 0, bytes: 0 };
      a ??= { kind: sample.kind, last, since: new Map() };
      a.last = last;
      const views = index.ofSample(sample);
      for (const view of views) {
        const id = idOfView(view);
        const since = a.since.get(id) ?? { view, base };
        since.view = view;
        a.since.set(id, since);
        counted.push([id, view, sample.kind, minus(last, since.base)]);
      }
      if (a.since.size > views.length) this.retireLeft(a, new Set(views.map(idOfView)));
      this.attributions.set(key, a);
    }
    for (const [key, a] of this.attributions) {
      if (present.has(key)) continue;
      this.retire(a);
      this.attributions.delete(key);
    }
    const packets: Facts['packets'] = new Map();
    for (const [id, { view, byKind }] of this.retired)
      for (const [kind, c] of byKind) addCount(packets, id, view, kind, c);
    for (const [id, view, kind, count] of counted) addCount(packets, id, view, kind, count);
    return packets;
  }

  /** The ports a counter no longer counts for keep what it counted for them. */
  private retireLeft(a: Attribution, current: ReadonlySet<string>): void {
    for (const [id, since] of a.since) {
      if (current.has(id)) continue;
      addCount(this.retired, id, since.view, a.kind, minus(a.last, since.base));
      a.since.delete(id);
    }
  }

  /** The counter counts for no Service port any more: each keeps what it counted for it. */
  private retire(a: Attribution): void {
    this.retireLeft(a, new Set());
  }

  private valuesOf(id: string, facts: Facts, agent: AgentState): ServicePortValues {
    // The current index's view first: counts kept from counters that left carry the view they had then.
    const view = this.ids?.viewOf.get(id) ?? facts.packets.get(id)?.view;
    const finding = facts.findings.get(id)?.[0];
    const flows = facts.flows.get(id);
    let labels: ServicePortLabels;
    if (view) labels = servicePortLabels(view, view.protocol, view.port);
    else if (flows) labels = { ...flows.svc };
    else labels = servicePortLabels(finding!.service, finding!.port.protocol, finding!.port.port);
    const lbPath = new Map<CounterKind, PacketCount>();
    if (agent.counter) {
      const counted = facts.packets.get(id)?.byKind;
      for (const kind of COUNTER_KINDS) lbPath.set(kind, counted?.get(kind) ?? { packets: 0, bytes: 0 });
    }
    const flowCounts = new Map<FlowOutcome, number>();
    if (flows) for (const outcome of FLOW_OUTCOMES) if (flows[outcome] > 0) flowCounts.set(outcome, flows[outcome]);
    return {
      labels,
      view,
      lbPath,
      flows: flowCounts,
      entries: facts.entries.get(id) ?? new Map(),
      findings: (facts.findings.get(id) ?? []).map((f) => ({ mechanism: f.mechanism, severity: f.severity })),
    };
  }

  /** The ports with findings first, then by id (namespace/name, protocol, port), so the same ones keep their series. */
  private withinCap(active: string[], facts: Facts): string[] {
    if (active.length <= this.opts.maxServicePorts) return active;
    const ranked = active.sort(
      (a, b) => Number(facts.findings.has(b)) - Number(facts.findings.has(a)) || (a < b ? -1 : 1),
    );
    for (const id of ranked.slice(this.opts.maxServicePorts)) this.dropped.add(id);
    return ranked.slice(0, this.opts.maxServicePorts);
  }

  /** Each Service port's id in an index, both ways, made once per index. */
  private idsOf(index: AgentState['index']): PortIds {
    if (this.ids?.index !== index) {
      const idOf = new Map(index.services.map((s) => [s, portKey(s, s.protocol, s.port)]));
      this.ids = { index, idOf, viewOf: new Map([...idOf].map(([view, id]) => [id, view])) };
    }
    return this.ids;
  }
}
