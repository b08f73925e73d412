// The live view by list+watch, debounced; while the API is away the last good view stays, marked fresh:false.
import { byText } from '../compare.js';
import type { Logger } from '../log.js';
import type { SourceStatus } from '../model/source-status.js';
import { assembleClusterView, type ParsedObjects, parsersFor } from './build.js';
import type { SkippedObject } from './json-reduce.js';
import { KubeApi } from './kube-api.js';
import { loadApiTarget } from './kube-config.js';
import { OBJECT_SHAPES } from './object-shapes.js';
import {
  apiVersionOf,
  collectionPath,
  GATEWAY_KINDS,
  KIND_APIS,
  KINDS,
  type Kind,
  type KindApi,
  type SourcedObject,
} from './objects.js';
import { Reflector, type ReflectorOptions } from './reflector.js';
import type { ClusterView } from './types.js';

export interface ClusterWatchOptions {
  /** This node's name (the DaemonSet passes spec.nodeName); endpoints on it are local. */
  nodeName: string;
  /** A kubeconfig file; without it, the pod's service account (in-cluster config). */
  kubeconfig?: string;
  /** Called with each new view after the first complete sync, and when freshness changes. */
  onChange?: (view: ClusterView) => void;
  log?: Logger;
  /** Quiet time before a change is emitted (default 200 ms); a steady stream still emits every 5×. */
  debounceMs?: number;
  /** Default 500 ms, doubling with jitter up to backoffMaxMs (default 30 s). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Server-side watch timeout before a cheap resume (default 300 s). */
  watchTimeoutS?: number;
  /** List page size (default 500). */
  pageSize?: number;
  /** How often a Gateway API kind without its CRD is listed again, to notice one installed later (default 10 min). */
  crdRecheckMs?: number;
}

/** Where each kind is listed and watched, as KIND_APIS states it; `name` labels it in reasons and warnings. */
export function collection(
  api: KindApi,
): Pick<ReflectorOptions<unknown>, 'name' | 'path' | 'optional' | 'crd' | 'fallbacks' | 'neither' | 'groupPath'> {
  const { optional, crd } = api;
  const where = { name: api.thisNodeOnly ? 'node' : api.resource, path: collectionPath(api), optional, crd };
  const others = api.versions.slice(1);
  if (others.length === 0) return where;
  const wanted = apiVersionOf(api);
  // Each Gateway API release serves its own versions of a kind, so reading another one is no news.
  const fallbacks = others.map((v) => ({
    path: collectionPath(api, v),
    ...(crd ? {} : { note: `${api.kind}s: ${wanted} not served (404), using ${v}` }),
  }));
  const neither =
    others.length === 1
      ? `${api.kind}s: neither ${wanted} nor ${others[0]} served (404)`
      : `${api.kind}s: none of ${wanted}, ${others.join(', ')} served (404)`;
  return { ...where, fallbacks, neither, ...(crd ? { groupPath: `/apis/${api.group}` } : {}) };
}

const GATEWAY_API_LOG = {
  absent: 'Gateway API not installed (no gateway.networking.k8s.io CRDs): no Gateway addresses to follow',
  up: 'Gateway API installed: Gateway addresses are followed',
};

export class ClusterWatch {
  private readonly stores = new Map<Kind, Reflector<unknown>>();
  private running?: Promise<void>[];
  private timer?: NodeJS.Timeout;
  private firstPendingAt?: number;
  private lastFreshAt?: string;
  private lastFresh?: boolean;
  private lastGatewayApi?: 'up' | 'absent';
  private stopped = false;
  private readonly waiters: ((v: ClusterView) => void)[] = [];

  /** Throws if no API configuration can be found (see loadApiTarget). */
  constructor(private readonly o: ClusterWatchOptions) {
    const kubeApi = new KubeApi(loadApiTarget(o.kubeconfig));
    const parsers = parsersFor(o.nodeName);
    for (const kind of KINDS) {
      const api = KIND_APIS[kind];
      const c = collection(api);
      const parse = parsers[kind] as (s: SourcedObject) => unknown;
      const reflector = new Reflector(kubeApi, {
        ...c,
        query: api.thisNodeOnly ? { fieldSelector: `metadata.name=${o.nodeName}` } : {},
        pageSize: o.pageSize ?? 500,
        watchTimeoutS: o.watchTimeoutS ?? 300,
        backoffInitialMs: o.backoffInitialMs ?? 500,
        backoffMaxMs: o.backoffMaxMs ?? 30_000,
        absentRecheckMs: o.crdRecheckMs ?? 600_000,
        onFallback: (m) => o.log?.warn({ source: 'cluster', reason: m }, m),
        // Only what the view reads is kept of each object, as it arrives: a namespace's fat objects cost no heap.
        shape: OBJECT_SHAPES[kind],
        onSkip: (s) => {
          const fields = { source: 'cluster', kind: s.kind, object: objectName(s), bytes: s.bytes, reason: s.reason };
          o.log?.warn(fields, 'cluster object skipped: too large');
        },
        // Each object is parsed once, as it arrives; the store keeps the result, not the JSON.
        transform: (object) => parse({ origin: c.name, object }),
        onChange: () => this.schedule(),
      });
      this.stores.set(kind, reflector);
    }
  }

  start(): void {
    if (this.running) return;
    this.running = this.reflectors().map((r) => r.run());
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    for (const r of this.reflectors()) r.stop();
    await Promise.all(this.running ?? []);
    this.running = undefined;
  }

  /** Resolves with the first view built after every collection has been listed. */
  synced(): Promise<ClusterView> {
    if (this.allSynced()) return Promise.resolve(this.view());
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** The current view, built now from the stores. */
  view(): ClusterView {
    const notes: string[] = [];
    for (const r of this.reflectors()) {
      const h = r.health();
      if (h.healthy && h.reason) notes.push(h.reason);
      notes.push(...skippedNotes(r.skippedObjects()));
    }
    const stale = this.staleReason();
    const now = new Date().toISOString();
    if (!stale) this.lastFreshAt = now;
    const parsed = Object.fromEntries(KINDS.map((kind) => [kind, this.store(kind).store.values()]));
    return assembleClusterView(parsed as unknown as ParsedObjects, {
      nodeName: this.o.nodeName,
      fresh: !stale,
      ...(stale ? { staleReason: stale } : {}),
      ...(this.lastFreshAt ? { syncedAt: this.lastFreshAt } : {}),
      warnings: notes,
    });
  }

  /** Gateway API availability: `absent` when every kind answered 404, `up` when one listed, else `unknown`. */
  gatewayApi(): 'up' | 'absent' | 'unknown' {
    const health = GATEWAY_KINDS.map((k) => this.store(k).health());
    if (!health.every((h) => h.synced)) return 'unknown';
    return health.every((h) => h.absent) ? 'absent' : 'up';
  }

  /** One line when Gateway API is found or found missing, so that no Gateway VIP is not taken for no Gateway. */
  private logGatewayApi(): void {
    const state = this.gatewayApi();
    if (state === 'unknown' || state === this.lastGatewayApi) return;
    this.lastGatewayApi = state;
    this.o.log?.info({ source: 'cluster', gatewayApi: state }, GATEWAY_API_LOG[state]);
  }

  /** The objects left out of the view as too large, of every kind. */
  skippedObjects(): SkippedObject[] {
    return this.reflectors().flatMap((r) => r.skippedObjects());
  }

  /** Health of the 'cluster' source, node_exporter style. */
  status(): SourceStatus {
    const stale = this.staleReason();
    const listMs = this.reflectors().reduce((sum, r) => sum + (r.health().listMs ?? 0), 0);
    return { source: 'cluster', available: !stale, durationMs: listMs, ...(stale ? { reason: stale } : {}) };
  }

  private reflectors(): Reflector<unknown>[] {
    return [...this.stores.values()];
  }

  private store(kind: Kind): Reflector<unknown> {
    return this.stores.get(kind)!;
  }

  private allSynced(): boolean {
    return this.reflectors().every((r) => r.health().synced);
  }

  private staleReason(): string | undefined {
    const bad = this.reflectors()
      .map((r) => r.health())
      .filter((h) => !h.healthy || !h.synced);
    if (bad.length === 0) return undefined;
    const first = bad.reduce((a, b) => (b.since < a.since ? b : a));
    const what = this.allSynced() ? 'API unavailable, showing the last good view' : 'not synced yet';
    return `${what}: ${first.reason ?? 'unknown'} (since ${new Date(first.since).toISOString()})`;
  }

  /** Debounce: emit after debounceMs of quiet, but at most 5×debounceMs after the first pending change. */
  private schedule(): void {
    if (this.stopped) return;
    const debounce = this.o.debounceMs ?? 200;
    const now = Date.now();
    this.firstPendingAt ??= now;
    const wait = Math.max(0, Math.min(debounce, this.firstPendingAt + 5 * debounce - now));
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.emit(), wait);
  }

  private emit(): void {
    this.firstPendingAt = undefined;
    if (!this.allSynced()) return;
    const view = this.view();
    if (this.lastFresh !== undefined && this.lastFresh !== view.fresh) {
      if (view.fresh) this.o.log?.info({ source: 'cluster' }, 'cluster API reachable again; view is fresh');
      else this.o.log?.warn({ source: 'cluster', reason: view.staleReason }, 'cluster view is stale');
    }
    this.lastFresh = view.fresh;
    this.logGatewayApi();
    for (const w of this.waiters.splice(0)) w(view);
    this.o.onChange?.(view);
  }
}

/** Named one by one up to this many per kind; past it, counted. */
const SKIPPED_NAMED = 10;

/** One warning per skipped object, as for an object that does not parse, up to SKIPPED_NAMED. */
function skippedNotes(skipped: SkippedObject[]): string[] {
  // In name order: the same objects skipped give the same warnings, whatever order they came in.
  skipped.sort((a, b) => byText(a.label, b.label));
  const notes = skipped.slice(0, SKIPPED_NAMED).map((s) => `${s.label} skipped: ${s.bytes} bytes; ${s.reason}`);
  if (skipped.length > SKIPPED_NAMED)
    notes.push(`${skipped.length - SKIPPED_NAMED} more ${skipped[0]!.kind} objects skipped as too large`);
  return notes;
}

/** "namespace/name", or the name of a cluster-scoped object. */
function objectName(s: SkippedObject): string {
  return `${s.namespace !== undefined ? `${s.namespace}/` : ''}${s.name ?? '(name not read)'}`;
}
