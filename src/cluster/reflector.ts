// List+watch of one collection into a store, as client-go's reflector: paged list, watch, relist on 410, jittered
// backoff; the last good state stays while the API is away, oversized objects as SkippedObjects.
import { isObj } from './fields.js';
import { type Shape, SkippedObject } from './json-reduce.js';
import { ApiError, type KubeApi } from './kube-api.js';
import { ObjectStore } from './object-store.js';

export interface ReflectorOptions<T> {
  /** e.g. 'services'; names the source in reasons and warnings. */
  name: string;
  path: string;
  /** Extra query for list and watch, e.g. { fieldSelector: 'metadata.name=node-a' }. */
  query?: Record<string, string>;
  pageSize: number;
  /** Server-side watch timeout; the watch is then resumed (cheap, no relist). */
  watchTimeoutS: number;
  backoffInitialMs: number;
  backoffMaxMs: number;
  /** A 403/404 on list means "this kind is not readable": synced empty with a note instead of failing. */
  optional?: boolean;
  /** A kind a CRD adds (with `optional`): a 404 on list before any list succeeded is "not installed", synced empty
   * and `absent`; once listed, a 404 is a failure like any other (unhealthy, the store kept). */
  crd?: boolean;
  /** How long an absent `crd` kind waits before it is listed again (default backoffMaxMs). */
  absentRecheckMs?: number;
  /** How long a `crd` kind once listed may answer 404 before it counts as uninstalled (default 5 minutes). */
  crdGoneAfterMs?: number;
  /** Other paths of the kind (other versions, e.g. EndpointSlice v1beta1 on 1.17-1.20), tried in order on a 404 on
   * list; a fallback's `note` shows in health. */
  fallbacks?: readonly { path: string; note?: string }[];
  /** The reason when no path is served (a 404 on each); without it, the last 404. */
  neither?: string;
  /** The kind's API group (/apis/GROUP): where it is 404 too, no CRD of it is installed and no fallback is tried. */
  groupPath?: string;
  /** Called with a fallback's note when switching to it, and with `neither` when that is a failure. */
  onFallback?(message: string): void;
  /** What is read of each object (object-shapes.ts); without, the whole object. */
  shape?: Shape;
  /** An object newly skipped by the shape's bounds (not again while it stays skipped). */
  onSkip?(skipped: SkippedObject): void;
  /** What the store keeps of each object: the object parsed, not the JSON (a fraction of its size). */
  transform(object: unknown): T;
  /** Something changed: the store, or whether it is synced/healthy. */
  onChange(): void;
}

export interface ReflectorHealth {
  /** Listed at least once (the store is a real snapshot, possibly old). */
  synced: boolean;
  /** The last list or watch attempt succeeded. */
  healthy: boolean;
  /** Why not healthy (the latest failure), or why an optional kind is empty. */
  reason?: string;
  /** Date.now() when `healthy`/`synced` last changed. */
  since: number;
  /** Milliseconds the last complete list took. */
  listMs?: number;
  /** A `crd` kind the API server does not serve (404 on list). */
  absent?: boolean;
}

type WatchEnd = 'closed' | 'expired' | 'stopped';

/** The watch events that change an object (BOOKMARK and ERROR do not). */
const OBJECT_EVENTS = new Set(['ADDED', 'MODIFIED', 'DELETED']);

/** Lists started again after a 410 on a continued page before the list counts as failed. */
export const MAX_LIST_RESTARTS = 3;

export class Reflector<T> {
  /** What `transform` kept of each object. Replaced whole by each list. */
  store = new ObjectStore<T>();
  /** The objects left out as too large, by "namespace/name". */
  private skipped = new Map<string, SkippedObject>();
  private rv?: string;
  /** The collection's path now: o.path, or one of o.fallbacks after a 404. */
  private path: string;
  /** How many of o.fallbacks have been tried since o.path. */
  private fallbacksTried = 0;
  private note?: string;
  /** A list has succeeded at least once, so a 404 now is an outage, not a kind that is not installed. */
  private listed = false;
  /** When a listed `crd` kind began to answer 404, while it still does. */
  private notFoundSince?: number;
  private stopped = false;
  private readonly stopping: Promise<'stopped'>;
  private signalStop!: () => void;
  /** Aborts the list or watch request in flight when stopped. */
  private readonly aborts = new AbortController();
  /** Closes the open watch stream. */
  private closeWatch?: () => void;
  /** Ends the watch in progress, open or still being opened, and its idle timer. */
  private endWatch?: () => void;
  private state: ReflectorHealth = { synced: false, healthy: false, reason: 'not listed yet', since: Date.now() };

  constructor(
    private readonly api: KubeApi,
    private readonly o: ReflectorOptions<T>,
  ) {
    this.stopping = new Promise((resolve) => (this.signalStop = () => resolve('stopped')));
    this.path = o.path;
  }

  health(): ReflectorHealth {
    return this.state;
  }

  skippedObjects(): SkippedObject[] {
    return [...this.skipped.values()];
  }

  /** Runs until stop(); never rejects. */
  async run(): Promise<void> {
    let failures = 0;
    let needList = true;
    while (!this.stopped) {
      try {
        if (needList) {
          if ((await Promise.race([this.list(), this.stopping])) === 'stopped') break;
          needList = false;
        }
        const started = Date.now();
        const ended = await Promise.race([this.watchOnce(), this.stopping]);
        if (ended === 'expired') needList = true;
        failures = 0;
        // A watch that ends at once, again and again, must not spin.
        if (ended === 'closed' && Date.now() - started < 1000) await this.sleep(this.o.backoffInitialMs);
      } catch (e) {
        if (this.stopped) break;
        let err = e instanceof ApiError ? e : new ApiError(String(e));
        if (needList && err.statusCode === 404 && this.o.fallbacks) {
          if ((await this.groupServed()) && this.nextPath()) continue;
          if (this.o.neither) err = new ApiError(this.o.neither, 404);
        }
        // An API server that restarts answers 404 for a CRD kind until it has loaded the CRDs: what was listed is
        // kept for a while; a 404 that lasts is an uninstalled CRD.
        const crdNotFound = this.o.crd === true && err.statusCode === 404;
        if (!crdNotFound) this.notFoundSince = undefined;
        else if (this.listed) {
          this.notFoundSince ??= Date.now();
          if (Date.now() - this.notFoundSince >= (this.o.crdGoneAfterMs ?? 300_000)) this.listed = false;
        }
        const absent = crdNotFound && !this.listed;
        const notReadable = err.statusCode === 403 || (err.statusCode === 404 && (absent || !this.o.crd));
        if (this.o.optional && needList && notReadable) {
          this.store.clear();
          const reason = `${this.o.name} not readable (${err.message}); treated as empty`;
          this.setHealth(absent ? { synced: true, healthy: true, absent } : { synced: true, healthy: true, reason });
          await this.sleep(absent ? (this.o.absentRecheckMs ?? this.o.backoffMaxMs) : this.o.backoffMaxMs);
          continue;
        }
        if (err.statusCode === 410) needList = true;
        const neither = err.message === this.o.neither;
        if (neither) this.o.onFallback?.(err.message);
        this.setHealth({
          synced: this.state.synced,
          healthy: false,
          reason: neither ? err.message : `${this.o.name}: ${err.message}`,
        });
        await this.sleep(backoff(failures++, this.o.backoffInitialMs, this.o.backoffMaxMs));
      }
    }
  }

  stop(): void {
    this.stopped = true;
    this.endWatch?.();
    this.aborts.abort();
    this.signalStop();
  }

  /** After a 404 on the first path: whether the kind's group is served (when unknown, taken as served). */
  private async groupServed(): Promise<boolean> {
    if (this.fallbacksTried > 0 || this.o.groupPath === undefined) return true;
    try {
      return await this.api.serves(this.o.groupPath, this.aborts.signal);
    } catch {
      return true;
    }
  }

  /** After a 404 on list: switches to the next fallback (true), or back to o.path when all were tried (false). */
  private nextPath(): boolean {
    const next = this.o.fallbacks?.[this.fallbacksTried];
    this.fallbacksTried = next ? this.fallbacksTried + 1 : 0;
    this.path = next?.path ?? this.o.path;
    this.note = next?.note;
    if (next?.note) this.o.onFallback?.(next.note);
    return next !== undefined;
  }

  private async list(): Promise<'listed'> {
    const started = Date.now();
    // A 410 on a later page: etcd compacted the first page's version, so relist a few times as client-go's pager does.
    let listed = await this.listPages();
    for (let restarts = 0; listed instanceof ApiError; restarts++) {
      if (restarts >= MAX_LIST_RESTARTS) throw listed;
      listed = await this.listPages();
    }
    const { items } = listed;
    if (this.stopped) return 'listed';
    this.listed = true;
    this.notFoundSince = undefined;
    this.store = items;
    const before = this.skipped;
    this.skipped = listed.skipped;
    for (const [key, s] of listed.skipped) if (!before.has(key)) this.o.onSkip?.(s);
    this.rv = listed.resourceVersion;
    this.setHealth({
      synced: true,
      healthy: true,
      listMs: Date.now() - started,
      ...(this.note ? { reason: this.note } : {}),
    });
    this.o.onChange();
    return 'listed';
  }

  /** Every page of one list, or the 410 of a continued page (returned: the list is started again). */
  private async listPages() {
    const items = new ObjectStore<T>();
    const skipped = new Map<string, SkippedObject>();
    let query: Record<string, string> = { ...this.o.query, limit: String(this.o.pageSize) };
    for (;;) {
      // Only the token outlives the page, so its parsed items are garbage before the next request.
      const page = await this.api
        .listPage(this.path, query, undefined, this.o.shape, this.aborts.signal)
        .catch((e: unknown) => {
          if (query.continue !== undefined && e instanceof ApiError && e.statusCode === 410) return e;
          throw e;
        });
      if (page instanceof ApiError) return page;
      for (const item of page.items) {
        if (item instanceof SkippedObject) skipped.set(skipKey(item, skipped.size), item);
        else items.set(...keyOf(item), this.o.transform(item));
      }
      if (page.continueToken === undefined || this.stopped)
        return { items, skipped, resourceVersion: page.resourceVersion };
      query = { ...query, continue: page.continueToken };
    }
  }

  /** One watch from this.rv: 'closed' at a normal end, 'expired' on 410; rejects on failure. */
  private watchOnce(): Promise<WatchEnd> {
    return new Promise((resolve, reject) => {
      let settled = false;
      let expired = false;
      let failed: ApiError | undefined;
      const timeoutS = Math.round(this.o.watchTimeoutS * (0.9 + Math.random() * 0.2));
      const finish = (end: WatchEnd | ApiError): void => {
        if (settled) return;
        settled = true;
        clearTimeout(idle);
        this.closeWatch?.();
        this.closeWatch = undefined;
        this.endWatch = undefined;
        if (end instanceof ApiError) reject(end);
        else resolve(end);
      };
      // The server ends the watch after timeoutSeconds, so silence well past it means a dead connection.
      const idle = setTimeout(
        () => finish(new ApiError(`watch got nothing for ${timeoutS + 30} s`)),
        (timeoutS + 30) * 1000,
      );
      this.endWatch = () => finish('stopped');
      const onEvent = (type: string, object: unknown): void => {
        if (type === 'ERROR') {
          // A Status object, normally; a server (or proxy) may send none at all.
          const status = isObj(object) ? object : {};
          if (status.code === 410) expired = true;
          else {
            const message =
              typeof status.message === 'string'
                ? status.message
                : `${JSON.stringify(object) ?? 'no Status object'}`.slice(0, 200);
            failed = new ApiError(`watch error: ${message}`, Number(status.code) || undefined);
          }
          this.closeWatch?.();
          return;
        }
        if (object instanceof SkippedObject) {
          this.skipEvent(type, object);
          return;
        }
        const rv = (object as { metadata?: { resourceVersion?: unknown } })?.metadata?.resourceVersion;
        if (typeof rv === 'string') this.rv = rv;
        // BOOKMARK: only the resourceVersion moves.
        if (!OBJECT_EVENTS.has(type)) return;
        const key = keyOf(object);
        if (type === 'DELETED') this.store.delete(...key);
        else this.store.set(...key, this.o.transform(object));
        // An object that fits again, or is gone, is no longer left out.
        if (this.skipped.size > 0) this.skipped.delete(key.join('/'));
        this.o.onChange();
      };
      const onEnd = (err?: ApiError): void => {
        if (expired || err?.statusCode === 410) finish('expired');
        else finish(failed ?? err ?? 'closed');
      };
      // The watch request uses the resourceVersion at the time it is sent.
      const query = {
        ...this.o.query,
        resourceVersion: this.rv ?? '',
        allowWatchBookmarks: 'true',
        timeoutSeconds: String(timeoutS),
      };
      this.api.watch(this.path, query, onEvent, onEnd, this.o.shape, this.aborts.signal).then(
        (close) => {
          if (settled || this.stopped) return close();
          this.closeWatch = close;
          if (!this.state.healthy)
            this.setHealth({ synced: this.state.synced, healthy: true, ...(this.note ? { reason: this.note } : {}) });
        },
        (e: unknown) => finish(e instanceof ApiError ? e : new ApiError(String(e))),
      );
    });
  }

  /** A watch event whose object is too large: out of the store, and kept aside unless deleted. */
  private skipEvent(type: string, skipped: SkippedObject): void {
    if (skipped.resourceVersion !== undefined) this.rv = skipped.resourceVersion;
    if (!OBJECT_EVENTS.has(type)) return;
    const key = skipKey(skipped, this.skipped.size);
    if (skipped.name !== undefined) this.store.delete(skipped.namespace ?? '', skipped.name);
    if (type === 'DELETED') {
      this.skipped.delete(key);
    } else {
      if (!this.skipped.has(key)) this.o.onSkip?.(skipped);
      this.skipped.set(key, skipped);
    }
    this.o.onChange();
  }

  private setHealth(health: Omit<ReflectorHealth, 'since'>): void {
    const flipped = health.healthy !== this.state.healthy || health.synced !== this.state.synced;
    const listMs = health.listMs ?? this.state.listMs;
    this.state = { ...health, since: flipped ? Date.now() : this.state.since };
    if (listMs !== undefined) this.state.listMs = listMs;
    // A new reason for the same outage (the next retry failing) is not a change worth a new view.
    if (flipped) this.o.onChange();
  }

  private async sleep(ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([new Promise((resolve) => (timer = setTimeout(resolve, ms))), this.stopping]);
    clearTimeout(timer);
  }
}

/** Exponential backoff with jitter: a random delay in [base/2, base], base doubling up to max. */
export function backoff(failures: number, initialMs: number, maxMs: number): number {
  const base = Math.min(maxMs, initialMs * 2 ** Math.min(failures, 30));
  return base / 2 + Math.random() * (base / 2);
}

/** "namespace/name" as keyOf gives it; one whose name was not read gets a number of its own. */
function skipKey(s: SkippedObject, n: number): string {
  return s.name === undefined ? `#unnamed-${n}` : `${s.namespace ?? ''}/${s.name}`;
}

/** Namespace ('' when cluster-scoped) and name; an object without a name gets one of its own. */
function keyOf(o: unknown): [string, string] {
  const m = (o as { metadata?: { namespace?: unknown; name?: unknown; uid?: unknown } })?.metadata;
  const name = typeof m?.name === 'string' ? m.name : `#${String(m?.uid ?? Math.random())}`;
  return [typeof m?.namespace === 'string' ? m.namespace : '', name];
}
