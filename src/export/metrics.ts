// The Prometheus registry of /metrics: it renders the families the collectors
// declare (src/agent/metrics/list.ts), each from one state read per scrape,
// then prom-client's process metrics. The families are declared as prom-client
// metrics (the registry lists their names, help and label names) but their
// samples are written straight from the state in prom-client's text format:
// with 5,000 Services (~50k series) going through prom-client's per-series
// label objects costs ~0.5 s a scrape (bench/agent.ts).
import * as client from './prom-client.js';
import { Group, label, plain, SVC_LABELS, type FamilyDecl, type ServicePortGroups } from './family.js';
import { FamilyRenderer } from './family-renderer.js';
import { chunkOf, gzipOf, textPieces, textSize, type Chunk } from './gzip-chunks.js';
import type { SvcPortLabels } from './state.js';

export interface MetricsOptions {
  /** At most this many Service ports get series; the rest are counted in clbprobe_series_dropped_total. */
  maxServicePorts: number;
  /** Adds prom-client's process metrics (process_cpu_seconds_total, ...); off for golden tests. */
  processMetrics: boolean;
}

/**
 * Which Service ports fit under the cap: the first N by name (namespace, service, port, protocol),
 * so the set is stable between scrapes. A Service port is known by its label text, cached per
 * labels object with the text's hash (they are immutable, see state.ts): the same objects come
 * back at every scrape, so a scrape does not rebuild or hash 5,000 label texts. One flat text each
 * (join): a separate key built by a template literal is a tree of concatenations, ~1 MB at 5,000
 * Services (heap snapshot).
 */
class CardinalityCap implements ServicePortGroups {
  private readonly dropped = new Set<string>();
  private readonly groups = new WeakMap<SvcPortLabels, Group>();
  /** update()'s count so far: a group whose mark is this one was counted in it. */
  private generation = 0;
  /** The admitted label texts when some Service ports are over the cap; undefined when all fit. */
  private allowed?: Set<string>;
  /** Counts the sets of admitted texts: a group's kept decision is valid while this is the same. */
  private decision = 1;
  /** How many groups (labels objects) the current decision was made over. */
  private decidedCount = 0;
  /** The last Service port group() looked up, and its answer. */
  private last: SvcPortLabels | undefined;
  private lastGroup: Group | null = null;
  constructor(private readonly max: number) {}

  /** The lists update() last looked at: the same lists again (the agent reuses them while nothing changed) need no look. */
  private seen: readonly (readonly { svc: SvcPortLabels }[])[] = [];

  /** The items of every per-Service family (the same list twice is looked at once). */
  update(lists: readonly (readonly { svc: SvcPortLabels }[])[]): void {
    const all = [...new Set(lists)];
    if (all.length === this.seen.length && all.every((list, i) => list === this.seen[i])) return;
    this.seen = all;
    // Counted by labels object, with a mark: under conntrack events some lists are new at every
    // scrape, and a Set of every label text made for them cost more than rendering (cpu profile).
    // Objects are at least as many as texts, so a count under the cap needs no texts.
    const generation = ++this.generation;
    let count = 0;
    // Every group was decided on by the current decision: with as many groups as then, they are
    // the same groups, and the decision stands (lists under events are new at every scrape, and
    // deciding again sorts every label text).
    let decided = this.allowed !== undefined;
    for (const list of all) {
      let last: SvcPortLabels | undefined;
      for (let i = 0; i < list.length; i++) {
        const svc = list[i]!.svc;
        if (svc === last) continue; // a Service port's items mostly come together
        last = svc;
        const g = this.groupOf(svc);
        if (g.mark !== generation) {
          g.mark = generation;
          count++;
          if (g.decision !== this.decision) decided = false;
        }
      }
    }
    if (decided && count === this.decidedCount) return;
    if (count <= this.max) {
      this.decide(undefined);
      return;
    }
    const texts = new Set<string>();
    for (const list of all) for (const x of list) texts.add(this.groupOf(x.svc).text);
    if (texts.size <= this.max) {
      this.decide(undefined);
      return;
    }
    // Label texts sort as their values do: each value ends at a '"', which sorts before any
    // character a name or port has.
    const sorted = [...texts].sort();
    const allowed = new Set(sorted.slice(0, this.max));
    this.decide(allowed);
    for (const k of sorted.slice(this.max)) this.dropped.add(k);
    for (const list of all) {
      for (const x of list) {
        const g = this.groupOf(x.svc);
        g.decision = this.decision;
        g.over = !allowed.has(g.text);
      }
    }
    this.decidedCount = count;
  }
  /**
   * The Service port's group (label text and hash), or null when it is over the cap. Called for
   * every sample of every per-Service family at every scrape (70k at 20,000 Services): over the cap,
   * a Set lookup of the label text each time cost 40 ms a scrape (cpu profile), so update() writes
   * its decision into each group, and a run of samples of one Service port (they mostly come
   * together) looks up nothing.
   */
  group(s: SvcPortLabels): Group | null {
    if (s === this.last) return this.lastGroup;
    const g = this.groupOf(s);
    // update() decided on every group of the lists; one it did not see is looked up.
    const admitted = this.allowed === undefined || (g.decision === this.decision ? !g.over : this.allowed.has(g.text));
    const r = admitted ? g : null;
    this.last = s;
    this.lastGroup = r;
    return r;
  }
  get droppedCount(): number {
    return this.dropped.size;
  }
  /** A new set of admitted texts (undefined: all are): every group's kept decision is stale. */
  private decide(allowed: Set<string> | undefined): void {
    this.allowed = allowed;
    this.decision++;
    this.last = undefined;
    this.lastGroup = null;
  }
  private groupOf(s: SvcPortLabels): Group {
    let g = this.groups.get(s);
    if (g === undefined) this.groups.set(s, (g = new Group(svcLabelText(s))));
    return g;
  }
}

/**
 * A Service port's label text. Its own function, not a closure inside groupOf: a closure over `s`
 * there makes V8 allocate a context on every call, hit or miss (~40 bytes, 120k calls a scrape at
 * 5,000 Services: 4.7 MB of garbage per scrape, found by allocation sampling).
 */
function svcLabelText(s: SvcPortLabels): string {
  // join: a flat string. Appended piece by piece it is a tree of concatenations, which every lookup
  // of the cap's Set over the cap walks again: 40-60 ms a scrape at 20,000 Services (cpu profile).
  return SVC_LABELS.map((n) => label(n, s[n])).join(',');
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

/** A registry that can hand /metrics its text as ready-made buffers, gzipped or not (see FamilyRegistry). */
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
 * kept plain it would be 5.5 MB of RSS.
 */
class FamilyRegistry extends client.Registry implements BufferedRegistry {
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

/**
 * A registry rendering `families` (in their order) from getState(), with the cardinality cap over
 * every per-Service family and clbprobe_series_dropped_total last.
 */
export function createFamilyRegistry<S>(families: readonly FamilyDecl<S>[], getState: () => S, opts: MetricsOptions): client.Registry {
  const cap = new CardinalityCap(opts.maxServicePorts);
  const dropped = plain<S, number>({
    name: 'clbprobe_series_dropped_total',
    help: 'Service ports left without series because of the cardinality cap (--max-service-ports).',
    type: 'counter',
    labelNames: [],
    items: () => [cap.droppedCount],
    key: () => '',
    labels: () => '',
    value: (n) => n,
  });
  const all = [...families, dropped];
  const names = new Set<string>();
  for (const d of all) {
    if (names.has(d.name)) throw new Error(`metric family ${d.name} declared twice`);
    names.add(d.name);
  }
  const renderers = all.map((d) => new FamilyRenderer(d.bind(cap)));
  const perService = all.flatMap((d) => (d.servicePorts ? [d.servicePorts] : []));

  let processRegistry: client.Registry | undefined;
  if (opts.processMetrics) {
    processRegistry = new client.Registry();
    // The event-loop lag histogram samples every 100 ms, not prom-client's default 10 ms: that
    // timer alone keeps an idle process at 0.7 % of a core (node's monitorEventLoopDelay on this
    // machine: 0.70 % at 10 ms, 0.05 % at 100 ms). The lag quantiles stay meaningful.
    client.collectDefaultMetrics({ register: processRegistry, eventLoopMonitoringPrecision: 100 });
  }
  const gap = chunkOf('\n');
  const registry = new FamilyRegistry(() => {
    const state = getState();
    cap.update(perService.map((items) => items(state)));
    const out: Chunk[] = [];
    for (let i = 0; i < renderers.length; i++) {
      // Families are separated by an empty line, as prom-client prints them.
      if (i > 0) out.push(gap);
      renderers[i]!.render(state, out);
    }
    return out;
  }, processRegistry);
  for (const { f } of renderers) {
    const declaration = { name: f.name, help: f.help, labelNames: f.labelNames, registers: [registry] };
    if (f.type === 'counter') new client.Counter(declaration);
    else new client.Gauge(declaration);
  }
  return registry;
}
