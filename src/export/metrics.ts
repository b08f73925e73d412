// The Prometheus metrics, each rendered from ExportState at scrape time.
// Names follow Prometheus conventions: prefix clbprobe_, counters end in
// _total, per-Service series carry namespace/service/port/protocol.
// The families are declared as prom-client metrics (the registry lists their
// names, help and label names) but their samples are written straight from
// the state in prom-client's text format: with 5,000 Services (~50k series)
// going through prom-client's per-series label objects took ~0.5 s a scrape
// (bench/agent.ts). Process metrics still come from prom-client.
import client from 'prom-client';
import type { ExportState, SvcPortLabels } from './state.js';

export interface MetricsOptions {
  /** At most this many Service ports get series; the rest are counted in clbprobe_series_dropped_total. */
  maxServicePorts: number;
  /** Adds prom-client's process metrics (process_cpu_seconds_total, ...); off for golden tests. */
  processMetrics: boolean;
}

const SVC = ['namespace', 'service', 'port', 'protocol'] as const;
const svcKey = (s: SvcPortLabels): string => `${s.namespace}/${s.service}:${s.port}/${s.protocol}`;

/** As prom-client escapes: HELP text and label values (most values need nothing: test first, it is cheaper). */
const escapeHelp = (s: string): string => s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
const escapeValue = (s: string): string => (/[\\\n"]/.test(s) ? escapeHelp(s).replace(/"/g, '\\"') : s);
const label = (name: string, value: string): string => `${name}="${escapeValue(value)}"`;
const valueText = (v: number): string => (Number.isNaN(v) ? 'Nan' : v === Infinity ? '+Inf' : v === -Infinity ? '-Inf' : `${v}`);

/**
 * Which Service ports fit under the cap: the first N by name, so the set is stable between scrapes.
 * Keys and label texts are cached per labels object (they are immutable, see state.ts): the same
 * objects come back at every scrape, so a scrape does not rebuild 5,000 label texts.
 */
class CardinalityCap {
  private readonly dropped = new Set<string>();
  private readonly keys = new WeakMap<SvcPortLabels, string>();
  private readonly texts = new WeakMap<SvcPortLabels, string>();
  /** The admitted keys when some Service ports are over the cap; undefined when all fit. */
  private allowed?: Set<string>;
  constructor(private readonly max: number) {}

  update(state: ExportState): void {
    const objects = new Set<SvcPortLabels>();
    const all = [state.lbPath, state.flows, state.findings, state.lbIpBound, state.ipvsRealServers, state.conntrackEntries];
    for (const list of all) for (const x of list) objects.add(x.svc);
    const keys = new Set<string>();
    for (const o of objects) keys.add(this.keyOf(o));
    if (keys.size <= this.max) {
      this.allowed = undefined;
      return;
    }
    const sorted = [...keys].sort();
    this.allowed = new Set(sorted.slice(0, this.max));
    for (const k of sorted.slice(this.max)) this.dropped.add(k);
  }
  /** The Service port's label text, or null when it is over the cap. */
  labels(s: SvcPortLabels): string | null {
    if (this.allowed && !this.allowed.has(this.keyOf(s))) return null;
    let text = this.texts.get(s);
    if (text === undefined) this.texts.set(s, (text = SVC.map((n) => label(n, s[n])).join(',')));
    return text;
  }
  get droppedCount(): number {
    return this.dropped.size;
  }
  private keyOf(s: SvcPortLabels): string {
    let k = this.keys.get(s);
    if (k === undefined) this.keys.set(s, (k = svcKey(s)));
    return k;
  }
}

/** One metric family: its declaration, and how its samples come out of the state. */
interface Family<T> {
  name: string;
  help: string;
  type: 'counter' | 'gauge';
  labelNames: string[];
  items(state: ExportState): Iterable<T>;
  /** The Service port's label text (cached, so cheap to look up), '' for families without one; null skips the item. */
  group(x: T): string | null;
  /** What tells the item's label set apart within its group (its other label values). */
  key(x: T): string;
  /** The item's full label text; only computed when the family is formatted again. */
  labels(x: T): string;
  value(x: T): number;
}

/**
 * Renders a family, reusing last scrape's text when its samples are the same (same label sets in
 * the same order, same values): with 5,000 Service ports most scrapes change nothing, and
 * formatting ~50k series costs tens of ms and MBs of garbage (bench/agent.ts). What is compared
 * is cheap: the group and key strings are the same string objects from scrape to scrape.
 * Repeated label sets in one scrape add up (counters) or replace (gauges), as in prom-client.
 */
class FamilyRenderer<T> {
  private last: Samples<T> & { text: string } = { items: [], groups: [], keys: [], values: [], text: '' };
  private rendered = false;
  constructor(readonly f: Family<T>) {}

  render(state: ExportState): string {
    const f = this.f;
    const last = this.last;
    // Compare as we go; arrays for this scrape are only made from the first difference on.
    let same = 0;
    let cur: Samples<T> | undefined;
    for (const x of f.items(state)) {
      const group = f.group(x);
      if (group === null) continue;
      const key = f.key(x);
      const value = f.value(x);
      if (!cur && same < last.values.length && last.groups[same] === group && last.keys[same] === key && last.values[same] === value) {
        same++;
        continue;
      }
      cur ??= prefix(last, same);
      cur.items.push(x);
      cur.groups.push(group);
      cur.keys.push(key);
      cur.values.push(value);
    }
    if (!cur && same === last.values.length && this.rendered) return last.text;
    this.rendered = true;
    cur ??= prefix(last, same);
    const index = new Map<string, number>();
    const labels: string[] = [];
    const merged: number[] = [];
    for (let i = 0; i < cur.items.length; i++) {
      const id = `${cur.groups[i]}\0${cur.keys[i]}`;
      const at = index.get(id);
      if (at === undefined) {
        index.set(id, merged.length);
        labels.push(f.labels(cur.items[i]!));
        merged.push(cur.values[i]!);
      } else merged[at] = f.type === 'counter' ? merged[at]! + cur.values[i]! : cur.values[i]!;
    }
    // An unlabelled counter shows 0 rather than nothing (prom-client's reset()).
    if (f.type === 'counter' && f.labelNames.length === 0 && merged.length === 0) {
      labels.push('');
      merged.push(0);
    }
    const lines = [`# HELP ${f.name} ${escapeHelp(f.help)}`, `# TYPE ${f.name} ${f.type}`];
    for (let i = 0; i < merged.length; i++) lines.push(`${f.name}${labels[i] ? `{${labels[i]}}` : ''} ${valueText(merged[i]!)}`);
    this.last = { ...cur, text: lines.join('\n') };
    return this.last.text;
  }
}

/** One scrape's samples of a family, in order (items are kept to format their labels again). */
interface Samples<T> {
  items: T[];
  groups: string[];
  keys: string[];
  values: number[];
}

const prefix = <T>(s: Samples<T>, n: number): Samples<T> => ({
  items: s.items.slice(0, n),
  groups: s.groups.slice(0, n),
  keys: s.keys.slice(0, n),
  values: s.values.slice(0, n),
});

/** A registry whose metrics() renders the families from one state read per scrape, then the process metrics. */
class AgentRegistry extends client.Registry {
  constructor(
    private readonly renderFamilies: () => string,
    private readonly processRegistry?: client.Registry,
  ) {
    super();
  }
  override async metrics(): Promise<string> {
    const ours = this.renderFamilies();
    return this.processRegistry ? `${ours}\n${await this.processRegistry.metrics()}` : ours;
  }
  override getMetricsAsArray(): ReturnType<client.Registry['getMetricsAsArray']> {
    return [...super.getMetricsAsArray(), ...(this.processRegistry?.getMetricsAsArray() ?? [])];
  }
}

export function createRegistry(getState: () => ExportState, opts: MetricsOptions): client.Registry {
  const cap = new CardinalityCap(opts.maxServicePorts);
  /** A per-Service family: one series per state item whose Service port is under the cap. */
  const perSvc = <T extends { svc: SvcPortLabels }>(
    decl: Pick<Family<T>, 'name' | 'help' | 'type'>,
    items: (s: ExportState) => readonly T[],
    extra: [string, (x: T) => string][],
    value: (x: T) => number,
  ): FamilyRenderer<T> => {
    const [first] = extra;
    return new FamilyRenderer<T>({
      ...decl,
      labelNames: [...SVC, ...extra.map(([n]) => n)],
      items,
      group: (x) => cap.labels(x.svc),
      key: extra.length === 1 ? first![1] : (x) => extra.map(([, v]) => v(x)).join('\0'),
      labels: (x) => [cap.labels(x.svc), ...extra.map(([n, v]) => label(n, v(x)))].join(','),
      value,
    });
  };
  /** A family with only a `source` label. */
  const bySource = (name: string, help: string, counts: (s: ExportState) => Record<string, number>): FamilyRenderer<[string, number]> =>
    new FamilyRenderer<[string, number]>({
      name,
      help,
      type: 'counter',
      labelNames: ['source'],
      items: (s) => Object.entries(counts(s)),
      group: () => '',
      key: ([source]) => source,
      labels: ([source]) => label('source', source),
      value: ([, n]) => n,
    });
  const families = [
    new FamilyRenderer<ExportState>({
      name: 'clbprobe_build_info',
      help: 'Always 1; the labels say which clbprobe runs on which node.',
      type: 'gauge',
      labelNames: ['version', 'node'],
      items: (s) => [s],
      group: () => '',
      key: (s) => `${s.version}\0${s.nodeName}`,
      labels: (s) => `${label('version', s.version)},${label('node', s.nodeName)}`,
      value: () => 1,
    }),
    new FamilyRenderer<ExportState['sources'][number]>({
      name: 'clbprobe_source_up',
      help: 'Whether a datapath or cluster source was read successfully (1) or is failing (0).',
      type: 'gauge',
      labelNames: ['source'],
      items: (s) => s.sources,
      group: () => '',
      key: (x) => x.source,
      labels: (x) => label('source', x.source),
      value: (x) => (x.up ? 1 : 0),
    }),
    bySource('clbprobe_resyncs_total', 'Full re-reads of a source (periodic, or after lost events).', (s) => s.resyncs),
    bySource('clbprobe_errors_total', 'Failed reads or updates, by source.', (s) => s.errors),
    ...(['packets', 'bytes'] as const).map((unit) =>
      perSvc(
        {
          name: `clbprobe_lb_path_${unit}_total`,
          help:
            unit === 'packets'
              ? 'Packets on the LB path by kind: to_lb (local source to an LB VIP), loop_return (local source back in from the uplink), hc_local_src (LB health checks with a node-bound source).'
              : 'Bytes on the LB path by kind (see clbprobe_lb_path_packets_total).',
          type: 'counter',
        },
        (s) => s.lbPath,
        [['kind', (x) => x.kind]],
        (x) => x[unit],
      ),
    ),
    perSvc(
      {
        name: 'clbprobe_conntrack_flows_total',
        help: 'Conntrack flows towards LB VIPs that ended, by outcome (replied, unreplied, loopback_pair, not_snated).',
        type: 'counter',
      },
      (s) => s.flows,
      [['outcome', (x) => x.outcome]],
      (x) => x.count,
    ),
    perSvc(
      {
        name: 'clbprobe_findings_active',
        help: 'Findings currently reported for a Service port (1 while present), by mechanism and severity.',
        type: 'gauge',
      },
      (s) => s.findings,
      [
        ['mechanism', (x) => x.mechanism],
        ['severity', (x) => x.severity],
      ],
      () => 1,
    ),
    perSvc(
      { name: 'clbprobe_lb_ip_bound', help: 'Whether the LB ingress IP of a Service port is bound on kube-ipvs0 on this node.', type: 'gauge' },
      (s) => s.lbIpBound,
      [['ip', (x) => x.ip]],
      (x) => (x.bound ? 1 : 0),
    ),
    perSvc(
      {
        name: 'clbprobe_ipvs_real_servers',
        help: 'IPVS real servers behind the LB VIP:port of a Service port, local (on this node) or remote.',
        type: 'gauge',
      },
      (s) => s.ipvsRealServers,
      [['locality', (x) => x.locality]],
      (x) => x.count,
    ),
    perSvc(
      { name: 'clbprobe_conntrack_entries', help: 'Conntrack entries towards the LB VIPs of a Service port, by state.', type: 'gauge' },
      (s) => s.conntrackEntries,
      [['state', (x) => x.state]],
      (x) => x.count,
    ),
    new FamilyRenderer<number>({
      name: 'clbprobe_series_dropped_total',
      help: 'Service ports left without series because of the cardinality cap (--max-service-ports).',
      type: 'counter',
      labelNames: [],
      items: () => [cap.droppedCount],
      group: () => '',
      key: () => '',
      labels: () => '',
      value: (n) => n,
    }),
  ];

  let processRegistry: client.Registry | undefined;
  if (opts.processMetrics) {
    processRegistry = new client.Registry();
    client.collectDefaultMetrics({ register: processRegistry });
  }
  // The whole text is reused too when no family changed: once written it is flat, and writing it
  // again costs no copy (a new join would copy 5 MB at 5,000 Services).
  let texts: string[] = [];
  let ours = '';
  const registry = new AgentRegistry(() => {
    const state = getState();
    cap.update(state);
    const next = families.map((r) => r.render(state));
    if (next.length !== texts.length || next.some((t, i) => t !== texts[i])) {
      texts = next;
      ours = `${next.join('\n\n')}\n`;
    }
    return ours;
  }, processRegistry);
  for (const { f } of families) {
    const declaration = { name: f.name, help: f.help, labelNames: f.labelNames, registers: [registry] };
    if (f.type === 'counter') new client.Counter(declaration);
    else new client.Gauge(declaration);
  }
  return registry;
}
