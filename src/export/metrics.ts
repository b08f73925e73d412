// The Prometheus metrics, each rendered from ExportState at scrape time.
// Names follow Prometheus conventions: prefix clbprobe_, counters end in
// _total, per-Service series carry namespace/service/port/protocol.
// The families are declared as prom-client metrics (the registry lists their
// names, help and label names) but their samples are written straight from
// the state in prom-client's text format: with 5,000 Services (~50k series)
// going through prom-client's per-series label objects took ~0.5 s a scrape
// (bench/agent.ts). Process metrics still come from prom-client.
import client from 'prom-client';
import { chunkOf, gzipOf, textPieces, textSize, type Chunk } from './gzip-chunks.js';
import type { ExportState, SvcPortLabels } from './state.js';

export interface MetricsOptions {
  /** At most this many Service ports get series; the rest are counted in clbprobe_series_dropped_total. */
  maxServicePorts: number;
  /** Adds prom-client's process metrics (process_cpu_seconds_total, ...); off for golden tests. */
  processMetrics: boolean;
}

const SVC = ['namespace', 'service', 'port', 'protocol'] as const;

/** As prom-client escapes: HELP text and label values (most values need nothing: test first, it is cheaper). */
const escapeHelp = (s: string): string => s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
const escapeValue = (s: string): string => (/[\\\n"]/.test(s) ? escapeHelp(s).replace(/"/g, '\\"') : s);
const label = (name: string, value: string): string => `${name}="${escapeValue(value)}"`;
const valueText = (v: number): string => (Number.isNaN(v) ? 'Nan' : v === Infinity ? '+Inf' : v === -Infinity ? '-Inf' : `${v}`);

/**
 * Which Service ports fit under the cap: the first N by name (namespace, service, port, protocol),
 * so the set is stable between scrapes. A Service port is known by its label text, cached per
 * labels object (they are immutable, see state.ts): the same objects come back at every scrape, so
 * a scrape does not rebuild 5,000 label texts. One flat text each (join): a separate key built by
 * a template literal was a tree of concatenations, ~1 MB at 5,000 Services (heap snapshot).
 */
class CardinalityCap {
  private readonly dropped = new Set<string>();
  private readonly texts = new WeakMap<SvcPortLabels, string>();
  /** The admitted label texts when some Service ports are over the cap; undefined when all fit. */
  private allowed?: Set<string>;
  constructor(private readonly max: number) {}

  /** The lists update() last looked at: the same lists again (the agent reuses them while nothing changed) need no look. */
  private seen: readonly unknown[][] = [];

  update(state: ExportState): void {
    const all = [state.lbPath, state.flows, state.findings, state.lbIpBound, state.ipvsRealServers, state.conntrackEntries];
    if (all.length === this.seen.length && all.every((list, i) => list === this.seen[i])) return;
    this.seen = all;
    const texts = new Set<string>();
    for (const list of all) for (const x of list) texts.add(this.textOf(x.svc));
    if (texts.size <= this.max) {
      this.allowed = undefined;
      return;
    }
    // Label texts sort as their values do: each value ends at a '"', which sorts before any
    // character a name or port has.
    const sorted = [...texts].sort();
    this.allowed = new Set(sorted.slice(0, this.max));
    for (const k of sorted.slice(this.max)) this.dropped.add(k);
  }
  /** The Service port's label text, or null when it is over the cap. */
  labels(s: SvcPortLabels): string | null {
    const text = this.textOf(s);
    return this.allowed && !this.allowed.has(text) ? null : text;
  }
  get droppedCount(): number {
    return this.dropped.size;
  }
  private textOf(s: SvcPortLabels): string {
    let text = this.texts.get(s);
    if (text === undefined) this.texts.set(s, (text = svcLabelText(s)));
    return text;
  }
}

/**
 * A Service port's label text. Its own function, not a closure inside textOf: a closure over `s`
 * there made V8 allocate a context on every call, hit or miss (~40 bytes, 120k calls a scrape at
 * 5,000 Services: 4.7 MB of garbage per scrape, found by allocation sampling).
 */
function svcLabelText(s: SvcPortLabels): string {
  return SVC.map((n) => label(n, s[n])).join(',');
}

/** One metric family: its declaration, and how its samples come out of the state. */
interface Family<T> {
  name: string;
  help: string;
  type: 'counter' | 'gauge';
  labelNames: string[];
  items(state: ExportState): readonly T[];
  /** The Service port's label text (cached, so cheap to look up), '' for families without one; null skips the item. */
  group(x: T): string | null;
  /** What tells the item's label set apart within its group (its other label values). */
  key(x: T): string;
  /** The item's full label text; only computed when the family is formatted again. */
  labels(x: T): string;
  value(x: T): number;
}

/** Sample lines per chunk: small enough that a changed counter re-formats little, large enough to be few. */
const CHUNK_LINES = 256;

/** One scrape's samples of a family, in order (items are kept to format their labels again). */
interface Samples<T> {
  items: T[];
  groups: string[];
  keys: string[];
  values: number[];
}

interface RenderedChunk<T> extends Samples<T> {
  out: Chunk;
}

const emptySamples = <T>(): Samples<T> => ({ items: [], groups: [], keys: [], values: [] });

const prefix = <T>(s: Samples<T>, n: number): Samples<T> => ({
  items: s.items.slice(0, n),
  groups: s.groups.slice(0, n),
  keys: s.keys.slice(0, n),
  values: s.values.slice(0, n),
});

/**
 * Renders a family in chunks of CHUNK_LINES samples, reusing last scrape's chunk when its samples
 * are the same (same label sets in the same order, same values): with 5,000 Service ports most
 * samples do not change between scrapes, and formatting ~50k series costs tens of ms and MBs of
 * garbage (bench/agent.ts). What is compared is cheap: the group and key strings are the same
 * string objects from scrape to scrape.
 * Repeated label sets in one scrape add up (counters) or replace (gauges), as in prom-client. They
 * are looked for only when the label sets change (new Services, new states), and a family that has
 * any is rendered whole (rare: the agent does not produce them).
 */
class FamilyRenderer<T> {
  private chunks: RenderedChunk<T>[] = [];
  private repeats = false;
  private readonly header: Chunk;
  private readonly empty: Chunk[];
  constructor(readonly f: Family<T>) {
    this.header = chunkOf(`# HELP ${f.name} ${escapeHelp(f.help)}\n# TYPE ${f.name} ${f.type}\n`);
    // An unlabelled counter shows 0 rather than nothing (prom-client's reset()).
    this.empty = f.type === 'counter' && f.labelNames.length === 0 ? [this.header, chunkOf(`${f.name} 0\n`)] : [this.header];
  }

  render(state: ExportState): Chunk[] {
    const f = this.f;
    const next: (RenderedChunk<T> | Samples<T>)[] = [];
    let labelSetsSame = true;
    let old: RenderedChunk<T> | undefined = this.chunks[0];
    let n = 0; // samples in the current chunk
    let same = 0; // of them, equal to old's from the start
    let cur: Samples<T> | undefined; // the current chunk's samples, from its first difference on
    const close = () => {
      if (!cur && old && same === old.values.length) next.push(old);
      else next.push(cur ?? prefix(old ?? emptySamples<T>(), same));
      old = this.chunks[next.length];
      n = same = 0;
      cur = undefined;
    };
    // An index loop, not for-of: at 50k samples a scrape, for-of's iterator results were ~1.8 MB
    // of garbage per scrape (allocation sampling), several scavenges in every scrape.
    const items = f.items(state);
    for (let i = 0; i < items.length; i++) {
      const x = items[i]!;
      const group = f.group(x);
      if (group === null) continue;
      if (n === CHUNK_LINES) close();
      const key = f.key(x);
      const value = f.value(x);
      const sameLabels = old !== undefined && n < old.values.length && old.groups[n] === group && old.keys[n] === key;
      if (!sameLabels) labelSetsSame = false;
      n++;
      if (!cur && sameLabels && old!.values[same] === value) {
        same++;
        continue;
      }
      cur ??= prefix(old ?? emptySamples<T>(), same);
      cur.items.push(x);
      cur.groups.push(group);
      cur.keys.push(key);
      cur.values.push(value);
    }
    if (n > 0) close();
    if (!labelSetsSame || next.length !== this.chunks.length) this.repeats = hasRepeats(next);
    if (this.repeats) {
      this.chunks = [];
      return this.renderMerged(next);
    }
    this.chunks = next.map((c) => ('out' in c ? c : kept(c, chunkOf(this.lines(c.items, c.values)))));
    return this.chunks.length === 0 ? this.empty : [this.header, ...this.chunks.map((c) => c.out)];
  }

  private lines(items: T[], values: number[]): string {
    const { f } = this;
    let text = '';
    for (let i = 0; i < items.length; i++) {
      const labels = f.labels(items[i]!);
      text += `${f.name}${labels ? `{${labels}}` : ''} ${valueText(values[i]!)}\n`;
    }
    return text;
  }

  /** The whole family with repeated label sets merged: counters add up, gauges keep the last. */
  private renderMerged(all: Samples<T>[]): Chunk[] {
    const index = new Map<string, number>();
    const items: T[] = [];
    const values: number[] = [];
    for (const c of all) {
      for (let i = 0; i < c.items.length; i++) {
        const id = `${c.groups[i]}\0${c.keys[i]}`;
        const at = index.get(id);
        if (at === undefined) {
          index.set(id, values.length);
          items.push(c.items[i]!);
          values.push(c.values[i]!);
        } else values[at] = this.f.type === 'counter' ? values[at]! + c.values[i]! : c.values[i]!;
      }
    }
    return [this.header, chunkOf(this.lines(items, values))];
  }
}

/**
 * A rendered chunk as kept until its samples change: the sample lists copied at their exact size
 * (push leaves up to a third of a 256-sample list empty; ~200 chunks at 5,000 Services).
 */
function kept<T>(c: Samples<T>, out: Chunk): RenderedChunk<T> {
  return { items: c.items.slice(), groups: c.groups.slice(), keys: c.keys.slice(), values: c.values.slice(), out };
}

function hasRepeats(chunks: Samples<unknown>[]): boolean {
  const seen = new Set<string>();
  for (const c of chunks) {
    for (let i = 0; i < c.groups.length; i++) {
      const id = `${c.groups[i]}\0${c.keys[i]}`;
      if (seen.has(id)) return true;
      seen.add(id);
    }
  }
  return false;
}

/**
 * A /metrics body: the gzip stream's pieces (the chunks as they are kept, plus a header and
 * trailer), or its text made piece by piece for clients that do not take gzip (server.ts sends
 * them as the socket drains: never the whole text in memory at once).
 */
export interface MetricsBody {
  readonly gzipped: readonly Buffer[];
  readonly gzippedLength: number;
  readonly textLength: number;
  /** The text in pieces of about pieceBytes, inflated as they are pulled. */
  text(pieceBytes: number): Iterable<Buffer>;
}

/** A registry that can hand /metrics its text as ready-made buffers, gzipped or not (see AgentRegistry). */
export interface BufferedRegistry extends client.Registry {
  metricsBody(): Promise<MetricsBody>;
}

export function isBufferedRegistry(r: client.Registry): r is BufferedRegistry {
  return typeof (r as Partial<BufferedRegistry>).metricsBody === 'function';
}

/**
 * A registry whose metrics() renders the families from one state read per scrape, then the
 * process metrics. metricsBody() gives the same text as one gzip stream of the chunks as they are
 * kept (compressed once, for as long as a chunk is reused). At 5,000 Services the text is 5.5 MB;
 * kept plain it was 5.5 MB of RSS.
 */
class AgentRegistry extends client.Registry implements BufferedRegistry {
  constructor(
    private readonly renderFamilies: () => Chunk[],
    private readonly processRegistry?: client.Registry,
  ) {
    super();
  }
  override async metrics(): Promise<string> {
    return Buffer.concat([...(await this.metricsBody()).text(1 << 20)]).toString();
  }
  async metricsBody(): Promise<MetricsBody> {
    const chunks = this.renderFamilies();
    if (this.processRegistry) chunks.push(chunkOf(`\n${await this.processRegistry.metrics()}`));
    const gzipped = gzipOf(chunks);
    return {
      gzipped,
      gzippedLength: gzipped.reduce((n, b) => n + b.length, 0),
      textLength: textSize(chunks),
      text: (pieceBytes) => textPieces(chunks, pieceBytes),
    };
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
  const bySource = (
    name: string,
    help: string,
    counts: (s: ExportState) => Record<string, number>,
    type: 'counter' | 'gauge' = 'counter',
  ): FamilyRenderer<[string, number]> =>
    new FamilyRenderer<[string, number]>({
      name,
      help,
      type,
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
    bySource('clbprobe_source_duration_seconds', 'How long the last read of a source took.', (s) => s.sourceDurations, 'gauge'),
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
    // The event-loop lag histogram samples every 100 ms, not prom-client's default 10 ms: that
    // timer alone kept an idle process at 0.7 % of a core (node's monitorEventLoopDelay on this
    // machine: 0.70 % at 10 ms, 0.05 % at 100 ms). The lag quantiles stay meaningful.
    client.collectDefaultMetrics({ register: processRegistry, eventLoopMonitoringPrecision: 100 });
  }
  const gap = chunkOf('\n');
  const registry = new AgentRegistry(() => {
    const state = getState();
    cap.update(state);
    // Families are separated by an empty line, as prom-client prints them.
    return families.flatMap((r, i) => (i === 0 ? r.render(state) : [gap, ...r.render(state)]));
  }, processRegistry);
  for (const { f } of families) {
    const declaration = { name: f.name, help: f.help, labelNames: f.labelNames, registers: [registry] };
    if (f.type === 'counter') new client.Counter(declaration);
    else new client.Gauge(declaration);
  }
  return registry;
}
