// Bearer-token access control for the agent's HTTP endpoints, decided by the API server as
// kube-rbac-proxy does: TokenReview says who the token belongs to, SubjectAccessReview says whether
// that user may do what is asked ("get" on the non-resource URL /metrics, "get" on a Service).
// Answers are cached, because Prometheus scrapes every node every 30 s with the same token and
// one scrape must not cost the API server two reviews per node:
// - who a token is: 2 min (a deleted service account keeps access at most that long);
// - allowed: 5 min, denied: 30 s (a new RoleBinding takes effect within 30 s);
// - bounded: at most MAX_ENTRIES of each, oldest dropped first; tokens are kept only as hashes.
// A review the API server could not answer is never cached and gives 503, not 401/403: the caller
// is not told "no" because the API was briefly away. At most MAX_PENDING reviews are in flight;
// concurrent requests with the same token share one review.
import { createHash } from 'node:crypto';
import type { AccessAttributes, AccessReviewResult, TokenReviewResult, UserInfo } from '../cluster/access-review.js';

export interface Reviews {
  reviewToken(token: string, audiences?: string[]): Promise<TokenReviewResult>;
  reviewAccess(user: UserInfo, attrs: AccessAttributes): Promise<AccessReviewResult>;
}

export type AuthDecision = { ok: true; user: UserInfo } | { ok: false; status: 401 | 403 | 503; message: string };

export interface AuthorizerOptions {
  authnTtlMs?: number;
  allowTtlMs?: number;
  denyTtlMs?: number;
  maxEntries?: number;
  maxPending?: number;
  /** TokenReview audiences (empty: the API server's own). */
  audiences?: string[];
  now?: () => number;
}

const MAX_ENTRIES = 1024;
const MAX_PENDING = 64;
/** Longer than any real token (service-account JWTs are ~1 KB, cloud OIDC ones a few KB). */
const MAX_TOKEN = 8192;

/** A map whose entries expire, holding at most `max` (the oldest inserted is dropped first). */
export class TtlCache<V> {
  private readonly map = new Map<string, { value: V; until: number }>();
  constructor(
    private readonly max: number,
    private readonly now: () => number,
  ) {}

  get(key: string): V | undefined {
    const e = this.map.get(key);
    if (!e) return undefined;
    if (e.until <= this.now()) {
      this.map.delete(key);
      return undefined;
    }
    return e.value;
  }

  set(key: string, value: V, ttlMs: number): void {
    this.map.delete(key);
    this.map.set(key, { value, until: this.now() + ttlMs });
    while (this.map.size > this.max) this.map.delete(this.map.keys().next().value!);
  }

  get size(): number {
    return this.map.size;
  }
}

/** The token of an "Authorization: Bearer T" header, or why there is none. */
export function bearerToken(header: string | undefined): { token: string } | { error: string } {
  if (!header) return { error: 'no bearer token (Authorization: Bearer ...)' };
  const m = /^bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  if (!m) return { error: 'the Authorization header is not "Bearer TOKEN"' };
  if (m[1]!.length > MAX_TOKEN) return { error: `bearer token longer than ${MAX_TOKEN} bytes` };
  return { token: m[1]! };
}

function attrsKey(a: AccessAttributes): string {
  if ('nonResource' in a) return `N ${a.nonResource.verb} ${a.nonResource.path}`;
  const r = a.resource;
  return `R ${r.verb} ${r.group}/${r.resource} ${r.namespace ?? ''}/${r.name ?? ''}`;
}

/** "get /metrics", "get services web in shop": the words of a 403. */
export function describeAttributes(a: AccessAttributes): string {
  if ('nonResource' in a) return `${a.nonResource.verb} ${a.nonResource.path}`;
  const r = a.resource;
  const res = r.group ? `${r.resource}.${r.group}` : r.resource;
  return `${r.verb} ${res}${r.name ? ` ${r.name}` : ''}${r.namespace ? ` in namespace ${r.namespace}` : ''}`;
}

export class KubeAuthorizer {
  private readonly now: () => number;
  private readonly users: TtlCache<TokenReviewResult>;
  private readonly decisions: TtlCache<AccessReviewResult>;
  private readonly pending = new Map<string, Promise<unknown>>();
  private readonly o: Required<Omit<AuthorizerOptions, 'now' | 'audiences'>>;
  /** Reviews sent to the API server, for tests and the log. */
  reviews = { token: 0, access: 0 };

  constructor(
    private readonly api: Reviews,
    opts: AuthorizerOptions = {},
  ) {
    this.now = opts.now ?? Date.now;
    this.o = {
      authnTtlMs: opts.authnTtlMs ?? 120_000,
      allowTtlMs: opts.allowTtlMs ?? 300_000,
      denyTtlMs: opts.denyTtlMs ?? 30_000,
      maxEntries: opts.maxEntries ?? MAX_ENTRIES,
      maxPending: opts.maxPending ?? MAX_PENDING,
    };
    this.audiences = opts.audiences ?? [];
    this.users = new TtlCache(this.o.maxEntries, this.now);
    this.decisions = new TtlCache(this.o.maxEntries, this.now);
  }

  private readonly audiences: string[];

  /** Decides one request from its Authorization header. Never throws. */
  async check(authorization: string | undefined, attrs: AccessAttributes): Promise<AuthDecision> {
    const b = bearerToken(authorization);
    if ('error' in b) return { ok: false, status: 401, message: b.error };
    const hash = createHash('sha256').update(b.token).digest('base64url');
    try {
      const who = await this.cached(this.users, `T ${hash}`, (r) => (r.authenticated ? this.o.authnTtlMs : this.o.denyTtlMs), () => {
        this.reviews.token++;
        return this.api.reviewToken(b.token, this.audiences);
      });
      if (!who.authenticated) return { ok: false, status: 401, message: `token not accepted by the API server: ${who.error}` };
      const user = who.user;
      const decision = await this.cached(this.decisions, `${hash} ${attrsKey(attrs)}`, (r) => (r.allowed ? this.o.allowTtlMs : this.o.denyTtlMs), () => {
        this.reviews.access++;
        return this.api.reviewAccess(user, attrs);
      });
      if (!decision.allowed) {
        const why = decision.reason ? ` (${decision.reason})` : '';
        return { ok: false, status: 403, message: `${user.username} may not ${describeAttributes(attrs)}${why}` };
      }
      return { ok: true, user };
    } catch (e) {
      return { ok: false, status: 503, message: `cannot check the token with the API server: ${e instanceof Error ? e.message : String(e)}` };
    }
  }

  private async cached<V>(cache: TtlCache<V>, key: string, ttl: (v: V) => number, ask: () => Promise<V>): Promise<V> {
    const hit = cache.get(key);
    if (hit !== undefined) return hit;
    const inFlight = this.pending.get(key) as Promise<V> | undefined;
    if (inFlight) return inFlight;
    if (this.pending.size >= this.o.maxPending) throw new Error(`${this.pending.size} reviews already waiting for the API server`);
    const p = ask().then(
      (v) => {
        cache.set(key, v, ttl(v));
        return v;
      },
    );
    this.pending.set(key, p);
    try {
      return await p;
    } finally {
      this.pending.delete(key);
    }
  }
}
