// Which Service ports have per-Service series on this node, and their values at one scrape. A
// Service port gets series once this node has something to say about it: a packet counted
// towards it, a conntrack entry or finished flow towards its VIP, or a finding. Its series retire
// after `idleMs` without any of these changing (docs/metrics.md explains the choice).
import type { CounterKind, CounterSample } from '../../capture/targets.js';
import type { ServiceView } from '../../cluster/types.js';
import { FLOW_OUTCOMES, type FlowOutcome } from '../../model/flow.js';
import { portKey, servicePortLabels, type ServicePortLabels } from '../../model/service.js';
import type { AgentState } from './agent-state.js';

export const PORT_LABELS = ['namespace', 'service', 'port', 'protocol'] as const;
type PortLabels = ServicePortLabels;

export const COUNTER_KINDS: readonly CounterKind[] = ['to_lb', 'loop_return', 'hc_local_src'];

export interface PacketCount {
  packets: number;
  bytes: number;
}

/** What one Service port's series say at a scrape. */
export interface ServicePortValues {
  labels: PortLabels;
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

/** The Service ports with series at one scrape, and how many were left out by the cap. */
export interface ServicePortsScrape {
  ports: ServicePortValues[];
  /** Service ports with something to say at this scrape, within the cap or not. */
  active: number;
  /** Distinct Service ports ever left out by the cap. */
  droppedTotal: number;
  /** Why the packet counters could not be read at this scrape (their last values are shown). */
  counterError?: string;
}

/** The sum of everything counted for a Service port: it moves whenever something new was seen. */
function activityOf(p: ServicePortValues): number {
  let sum = 0;
  for (const c of p.lbPath.values()) sum += c.packets;
  for (const n of p.flows.values()) sum += n;
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
      const state = kept.entry.tcpState ?? (kept.entry.statusFlags.includes('SEEN_REPLY') ? 'REPLIED' : 'UNREPLIED');
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

export class ServicePortSeries {
  /** When each Service port's activity last moved, with the value it had then. */
  private readonly lastMove = new Map<string, { activity: number; atMs: number }>();
  private readonly dropped = new Set<string>();
  private readonly entries = new EntriesByState();
  /** The last packet counts read, kept when a read fails: unknown is not zero. */
  private lastSamples: readonly CounterSample[] = [];
  private readonly now: () => number;

  constructor(private readonly opts: ServicePortsOptions) {
    this.now = opts.now ?? Date.now;
  }

  scrape(agent: AgentState): ServicePortsScrape {
    let counterError: string | undefined;
    if (agent.counter) {
      try {
        this.lastSamples = agent.counter.read().counters;
        counterError = agent.counter.stopped;
      } catch (e) {
        counterError = `reading counters: ${e instanceof Error ? e.message : String(e)}`;
      }
      agent.captureRead(counterError);
    }
    const candidates = this.candidates(agent);
    const nowMs = this.now();
    const active: ServicePortValues[] = [];
    for (const [id, values] of candidates) {
      const activity = activityOf(values);
      const last = this.lastMove.get(id);
      if (activity > 0 && last?.activity !== activity) this.lastMove.set(id, { activity, atMs: nowMs });
      const recent = (this.lastMove.get(id)?.atMs ?? -Infinity) > nowMs - this.opts.idleMs;
      if (recent || values.findings.length > 0 || values.entries.size > 0) active.push(values);
    }
    for (const id of this.lastMove.keys()) if (!candidates.has(id)) this.lastMove.delete(id);
    return { ports: this.withinCap(active), active: active.length, droppedTotal: this.dropped.size, ...(counterError ? { counterError } : {}) };
  }

  /** Every Service port with a count, an entry or a finding, keyed by portKey. */
  private candidates(agent: AgentState): Map<string, ServicePortValues> {
    const byId = new Map<string, ServicePortValues>();
    const counting = agent.counter !== undefined;
    const portOf = (id: string, labels: () => PortLabels, view?: ServiceView): ServicePortValues => {
      let p = byId.get(id);
      if (!p) {
        p = { labels: labels(), view, lbPath: new Map(), flows: new Map(), entries: new Map(), findings: [] };
        if (counting) for (const kind of COUNTER_KINDS) p.lbPath.set(kind, { packets: 0, bytes: 0 });
        byId.set(id, p);
      }
      p.view ??= view;
      return p;
    };
    const ofView = (s: ServiceView) => portOf(portKey(s, s.protocol, s.port), () => servicePortLabels(s, s.protocol, s.port), s);
    for (const sample of this.lastSamples) {
      for (const s of agent.index.ofSample(sample)) {
        const count = ofView(s).lbPath.get(sample.kind);
        if (!count) continue;
        count.packets += sample.packets;
        count.bytes += sample.bytes;
      }
    }
    for (const [id, counts] of agent.table.outcomes) {
      const p = portOf(id, () => ({ ...counts.svc }));
      for (const outcome of FLOW_OUTCOMES) if (counts[outcome] > 0) p.flows.set(outcome, counts[outcome]);
    }
    const views = new Map(agent.index.services.map((s) => [portKey(s, s.protocol, s.port), s]));
    for (const [id, byState] of this.entries.of(agent.table)) {
      const view = views.get(id);
      if (view) ofView(view).entries = byState;
    }
    for (const f of agent.findings) {
      const id = portKey(f.service, f.port.protocol, f.port.port);
      const p = portOf(id, () => servicePortLabels(f.service, f.port.protocol, f.port.port), views.get(id));
      p.findings.push({ mechanism: f.mechanism, severity: f.severity });
    }
    // Counts of zero say nothing: such a port is only a candidate through its other parts.
    for (const [id, p] of byId) {
      if (activityOf(p) === 0 && p.entries.size === 0 && p.findings.length === 0 && !this.lastMove.has(id)) byId.delete(id);
    }
    return byId;
  }

  /** The ports with findings first, then by name, so the same ones keep their series from scrape to scrape. */
  private withinCap(active: ServicePortValues[]): ServicePortValues[] {
    if (active.length <= this.opts.maxServicePorts) return active;
    const name = (p: ServicePortValues) => PORT_LABELS.map((l) => p.labels[l]).join('\0');
    const sorted = active.sort((a, b) => Number(b.findings.length > 0) - Number(a.findings.length > 0) || (name(a) < name(b) ? -1 : 1));
    for (const p of sorted.slice(this.opts.maxServicePorts)) this.dropped.add(name(p));
    return sorted.slice(0, this.opts.maxServicePorts);
  }
}
