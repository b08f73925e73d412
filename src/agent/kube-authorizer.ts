// Bearer-token access via TokenReview and SubjectAccessReview, as kube-rbac-proxy does: bounded caches of token hashes,
// unanswered reviews never cached (503), strangers rate-limited while recently allowed tokens keep their own lane.
import { createHash } from 'node:crypto';
import type { AccessAttributes, AccessReviewClient, UserInfo } from '../cluster/access-review.js';
import { errText } from '../errors.js';

export type Reviews = Pick<AccessReviewClient, 'reviewToken' | 'reviewAccess'>;

export type AuthDecision =
  | { ok: true; user: UserInfo }
  | { ok: false; status: 400 | 401 | 403 | 503; message: string }
  | { ok: false; status: 429; message: string; retryAfterS: number };

/** Who a token is, or why the request stops there. */
export type AuthnResult = { ok: true; user: UserInfo; tokenKey: string } | Exclude<AuthDecision, { ok: true }>;

export interface RateLimit {
  perSecond: number;
  burst: number;
}

export interface AuthorizerOptions {
  maxEntries?: number;
  /** Reviews in flight for untrusted tokens. */
  maxPending?: number;
  /** Reviews for untrusted tokens; share one limiter between authorizers that share an API server. */
  limiter?: ReviewRateLimiter;
  /** TokenReview audiences (empty: the API server's own). */
  audiences?: string[];
  now?: () => number;
}

const AUTHN_TTL_MS = 120_000;
const ALLOW_TTL_MS = 300_000;
const DENY_TTL_MS = 30_000;
/** How long a token stays trusted (its reviews take their own lane) after it was last allowed something. */
const TRUST_TTL_MS = 3_600_000;
const MAX_ENTRIES = 1024;
const MAX_PENDING = 32;
const MAX_PENDING_TRUSTED = 16;
const MAX_TRUSTED = 256;
/** Review rate for strangers, per source and overall, so a cluster-wide flood costs the API server a bounded rate. */
const DEFAULT_PER_SOURCE_RATE: RateLimit = { perSecond: 1, burst: 10 };
const DEFAULT_GLOBAL_RATE: RateLimit = { perSecond: 5, burst: 40 };
/** Source addresses whose buckets are remembered (the oldest forgotten first; the global bucket still holds). */
const MAX_SOURCES = 4096;
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

/** A token bucket: `burst` at once, then `perSecond`. */
export class TokenBucket {
  private tokens: number;
  private at: number;
  constructor(
    private readonly rate: RateLimit,
    private readonly now: () => number,
  ) {
    this.tokens = rate.burst;
    this.at = now();
  }

  /** Takes one token: 0 when granted, else the milliseconds until one is there. */
  take(): number {
    const t = this.now();
    this.tokens = Math.min(this.rate.burst, this.tokens + ((t - this.at) / 1000) * this.rate.perSecond);
    this.at = t;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - this.tokens) / this.rate.perSecond) * 1000);
  }
}

/** Per-source and global rates of reviews asked for untrusted tokens. */
export class ReviewRateLimiter {
  private readonly sources = new Map<string, TokenBucket>();
  private readonly global: TokenBucket;
  constructor(
    private readonly perSource: RateLimit = DEFAULT_PER_SOURCE_RATE,
    globalRate: RateLimit = DEFAULT_GLOBAL_RATE,
    private readonly now: () => number = Date.now,
  ) {
    this.global = new TokenBucket(globalRate, now);
  }

  /** 0 when a review may be sent for `source`, else the seconds to wait and whose limit it is. */
  take(source: string): { waitS: 0 } | { waitS: number; limit: string } {
    let bucket = this.sources.get(source);
    if (bucket) this.sources.delete(source);
    else bucket = new TokenBucket(this.perSource, this.now);
    this.sources.set(source, bucket);
    while (this.sources.size > MAX_SOURCES) this.sources.delete(this.sources.keys().next().value!);
    const own = bucket.take();
    if (own) return { waitS: waitSeconds(own), limit: `${this.perSource.perSecond}/s for ${source}` };
    const all = this.global.take();
    if (all) return { waitS: waitSeconds(all), limit: 'the rate for all new tokens' };
    return { waitS: 0 };
  }
}

/** Whole seconds to wait, at least one, for a Retry-After. */
const waitSeconds = (ms: number): number => Math.max(1, Math.ceil(ms / 1000));

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
function describeAttributes(attrs: AccessAttributes): string {
  if ('nonResource' in attrs) return `${attrs.nonResource.verb} ${attrs.nonResource.path}`;
  const r = attrs.resource;
  const res = r.group ? `${r.resource}.${r.group}` : r.resource;
  return `${r.verb} ${res}${r.name ? ` ${r.name}` : ''}${r.namespace ? ` in namespace ${r.namespace}` : ''}`;
}

/** A stable key for a user as SubjectAccessReview sees it (name, uid, groups, extra). */
function userKey(u: UserInfo): string {
  return createHash('sha256')
    .update(JSON.stringify([u.username, u.uid ?? '', u.groups, u.extra ?? {}]))
    .digest('base64url');
}

class Refusal extends Error {
  constructor(readonly decision: Exclude<AuthDecision, { ok: true }>) {
    super(decision.message);
  }
}

export class KubeAuthorizer {
  private readonly now: () => number;
  private readonly users: TtlCache<UserInfo>;
  private readonly rejectedTokens: TtlCache<string>;
  private readonly allowed: TtlCache<true>;
  private readonly denied: TtlCache<string>;
  private readonly trusted: TtlCache<true>;
  private readonly pending = new Map<string, Promise<unknown>>();
  private readonly inFlight = { trusted: 0, untrusted: 0 };
  private readonly limiter: ReviewRateLimiter;
  private readonly maxPending: number;
  private readonly audiences: string[];
  /** Reviews sent to the API server, for tests and the log. */
  reviews = { token: 0, access: 0 };

  constructor(
    private readonly api: Reviews,
    opts: AuthorizerOptions = {},
  ) {
    this.now = opts.now ?? Date.now;
    const maxEntries = opts.maxEntries ?? MAX_ENTRIES;
    this.maxPending = opts.maxPending ?? MAX_PENDING;
    this.audiences = opts.audiences ?? [];
    this.limiter = opts.limiter ?? new ReviewRateLimiter(DEFAULT_PER_SOURCE_RATE, DEFAULT_GLOBAL_RATE, this.now);
    this.users = new TtlCache(maxEntries, this.now);
    this.rejectedTokens = new TtlCache(maxEntries, this.now);
    this.allowed = new TtlCache(maxEntries, this.now);
    this.denied = new TtlCache(maxEntries, this.now);
    this.trusted = new TtlCache(Math.min(MAX_TRUSTED, maxEntries), this.now);
  }

  /** Decides one request from its Authorization header; `source` is the caller's address. Never throws. */
  async check(authorization: string | undefined, attrs: AccessAttributes, source = ''): Promise<AuthDecision> {
    const who = await this.authenticate(authorization, source);
    if (!who.ok) return who;
    return this.authorize(who.user, attrs, { tokenKey: who.tokenKey, source });
  }

  /** Who the bearer token is (TokenReview with this authorizer's audiences). Never throws. */
  async authenticate(authorization: string | undefined, source = ''): Promise<AuthnResult> {
    const b = bearerToken(authorization);
    if ('error' in b) return { ok: false, status: 401, message: b.error };
    const tokenKey = createHash('sha256').update(b.token).digest('base64url');
    const key = `T ${tokenKey}`;
    const known = this.users.get(key);
    if (known) return { ok: true, user: known, tokenKey };
    const rejected = this.rejectedTokens.get(key);
    if (rejected !== undefined)
      return { ok: false, status: 401, message: `token not accepted by the API server: ${rejected}` };
    try {
      const r = await this.review(key, { trusted: this.isTrusted(tokenKey), source }, async () => {
        this.reviews.token++;
        const r = await this.api.reviewToken(b.token, this.audiences);
        if (r.authenticated) this.users.set(key, r.user, AUTHN_TTL_MS);
        else this.rejectedTokens.set(key, r.error, DENY_TTL_MS);
        return r;
      });
      if (!r.authenticated)
        return { ok: false, status: 401, message: `token not accepted by the API server: ${r.error}` };
      return { ok: true, user: r.user, tokenKey };
    } catch (e) {
      return refusalOf(e);
    }
  }

  /** Whether `user` may do `attrs`; an allow makes `tokenKey` trusted. Never throws. */
  async authorize(
    user: UserInfo,
    attrs: AccessAttributes,
    by: { tokenKey: string; source: string },
  ): Promise<AuthDecision> {
    const key = `A ${userKey(user)} ${attrsKey(attrs)}`;
    const deny = (reason: string): AuthDecision => ({
      ok: false,
      status: 403,
      message: `${user.username} may not ${describeAttributes(attrs)}${reason ? ` (${reason})` : ''}`,
    });
    if (this.allowed.get(key)) return this.allow(user, by.tokenKey);
    const denied = this.denied.get(key);
    if (denied !== undefined) return deny(denied);
    try {
      const r = await this.review(key, { trusted: this.isTrusted(by.tokenKey), source: by.source }, async () => {
        this.reviews.access++;
        const r = await this.api.reviewAccess(user, attrs);
        if (r.allowed) this.allowed.set(key, true, ALLOW_TTL_MS);
        else this.denied.set(key, r.reason, DENY_TTL_MS);
        return r;
      });
      return r.allowed ? this.allow(user, by.tokenKey) : deny(r.reason);
    } catch (e) {
      return refusalOf(e);
    }
  }

  /** Whether this token was allowed something lately (its reviews take the trusted lane). */
  private isTrusted(tokenKey: string): boolean {
    return this.trusted.get(tokenKey) !== undefined;
  }

  private allow(user: UserInfo, tokenKey: string): AuthDecision {
    this.trusted.set(tokenKey, true, TRUST_TTL_MS);
    return { ok: true, user };
  }

  /** One review, shared by concurrent askers of the same key, in its lane's bounds. */
  private async review<V>(key: string, lane: { trusted: boolean; source: string }, ask: () => Promise<V>): Promise<V> {
    const shared = this.pending.get(key) as Promise<V> | undefined;
    if (shared) return shared;
    const kind = lane.trusted ? 'trusted' : 'untrusted';
    const max = lane.trusted ? MAX_PENDING_TRUSTED : this.maxPending;
    if (this.inFlight[kind] >= max) {
      throw new Refusal({
        ok: false,
        status: 503,
        message: `${this.inFlight[kind]} reviews already waiting for the API server`,
      });
    }
    if (!lane.trusted) {
      const rate = this.limiter.take(lane.source || 'unknown');
      if ('limit' in rate) {
        throw new Refusal({
          ok: false,
          status: 429,
          retryAfterS: rate.waitS,
          message: `too many token reviews (${rate.limit}); try again in ${rate.waitS} s`,
        });
      }
    }
    this.inFlight[kind]++;
    const p = ask();
    this.pending.set(key, p);
    try {
      return await p;
    } finally {
      this.pending.delete(key);
      this.inFlight[kind]--;
    }
  }
}

function refusalOf(e: unknown): Exclude<AuthDecision, { ok: true }> {
  if (e instanceof Refusal) return e.decision;
  return { ok: false, status: 503, message: `cannot check the token with the API server: ${errText(e)}` };
}
