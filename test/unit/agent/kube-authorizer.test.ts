// Bearer-token checks against the test API server's TokenReview and SubjectAccessReview
// (test/support/fake-access.ts), over real HTTP on loopback, with a clock the test moves.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearerToken, KubeAuthorizer, ReviewRateLimiter, type TtlCache } from '../../../src/agent/kube-authorizer.js';
import {
  type AccessAttributes,
  AccessReviewClient,
  parseAccessReview,
  parseTokenReview,
  ReviewError,
} from '../../../src/cluster/access-review.js';
import { loadApiTarget } from '../../../src/cluster/kube-config.js';
import { FakeApiServer } from '../../support/fake-apiserver.js';

const METRICS: AccessAttributes = { nonResource: { path: '/metrics', verb: 'get' } };
const PROM = {
  username: 'system:serviceaccount:monitoring:prometheus-k8s',
  uid: 'p-uid',
  groups: ['system:serviceaccounts', 'system:serviceaccounts:monitoring'],
};

describe('KubeAuthorizer against the test API server', () => {
  const api = new FakeApiServer();
  let dir: string;
  let client: AccessReviewClient;
  let now = 0;
  const fresh = (opts = {}) => new KubeAuthorizer(client, { now: () => now, ...opts });

  beforeAll(async () => {
    await api.start();
    dir = mkdtempSync(join(tmpdir(), 'cbx-authz-'));
    writeFileSync(join(dir, 'kubeconfig'), api.kubeconfig());
    client = new AccessReviewClient(loadApiTarget(join(dir, 'kubeconfig')), 2000);
    api.access.addToken('prom-token', PROM);
    api.access.addToken('dev-token', { username: 'dev', groups: ['developers'] });
    api.access.grant({
      subject: { group: 'system:serviceaccounts:monitoring' },
      binding: 'clbprobe-metrics-reader',
      rule: { verbs: ['get'], nonResourceURLs: ['/metrics'] },
    });
  });
  afterAll(async () => {
    await api.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    now = 1_000_000;
    api.access.log.length = 0;
  });

  it("allows Prometheus' service-account token, with the real review shapes, then answers from the cache", async () => {
    const a = fresh();
    const d = await a.check('Bearer prom-token', METRICS);
    expect(d).toMatchObject({ ok: true, user: { username: PROM.username, uid: 'p-uid' } });
    expect(d.ok && d.user.groups).toContain('system:authenticated');
    expect(api.access.log.map((l) => [l.kind, l.caller])).toEqual([
      ['TokenReview', 'tester'],
      ['SubjectAccessReview', 'tester'],
    ]);
    expect(api.access.log[1]!.spec).toEqual({
      user: PROM.username,
      uid: 'p-uid',
      groups: [...PROM.groups, 'system:authenticated'],
      nonResourceAttributes: { path: '/metrics', verb: 'get' },
    });
    now += 60_000;
    expect((await a.check('bearer  prom-token', METRICS)).ok).toBe(true);
    expect(api.access.log).toHaveLength(2);
  });

  it('401 without a token, for a malformed header (no review sent), and for a token the API server does not know', async () => {
    const a = fresh();
    expect(await a.check(undefined, METRICS)).toMatchObject({
      ok: false,
      status: 401,
      message: expect.stringContaining('no bearer token'),
    });
    expect(await a.check('Basic dXNlcjpwdw==', METRICS)).toMatchObject({ ok: false, status: 401 });
    expect(await a.check(`Bearer ${'x'.repeat(9000)}`, METRICS)).toMatchObject({ ok: false, status: 401 });
    expect(api.access.log).toEqual([]);
    expect(await a.check('Bearer stolen', METRICS)).toMatchObject({
      ok: false,
      status: 401,
      message: expect.stringContaining('token not accepted'),
    });
  });

  it('403 naming the user and the verb; a denial lasts 30 s, so a new binding takes effect after it', async () => {
    const a = fresh();
    expect(await a.check('Bearer dev-token', METRICS)).toEqual({
      ok: false,
      status: 403,
      message: 'dev may not get /metrics',
    });
    const ungrant = api.access.grant({
      subject: { user: 'dev' },
      rule: { verbs: ['get'], nonResourceURLs: ['/met*'] },
    });
    try {
      now += 20_000;
      expect((await a.check('Bearer dev-token', METRICS)).ok).toBe(false);
      now += 11_000;
      expect((await a.check('Bearer dev-token', METRICS)).ok).toBe(true);
    } finally {
      ungrant();
    }
  });

  it('an allow lasts 5 minutes after the binding is removed, not longer; who the token is is re-asked after 2 minutes', async () => {
    const ungrant = api.access.grant({
      subject: { user: 'dev' },
      rule: { verbs: ['get'], nonResourceURLs: ['/metrics'] },
    });
    const a = fresh();
    expect((await a.check('Bearer dev-token', METRICS)).ok).toBe(true);
    ungrant();
    now += 121_000;
    expect((await a.check('Bearer dev-token', METRICS)).ok).toBe(true);
    expect(a.reviews).toEqual({ token: 2, access: 1 });
    now += 180_000;
    expect(await a.check('Bearer dev-token', METRICS)).toMatchObject({ ok: false, status: 403 });
  });

  it('resource attributes: get on one Service in one namespace (RoleBinding-scoped)', async () => {
    const ungrant = api.access.grant({
      subject: { group: 'developers' },
      namespace: 'shop',
      rule: { verbs: ['get'], apiGroups: [''], resources: ['services'] },
    });
    try {
      const a = fresh();
      const svc = (namespace: string): AccessAttributes => ({
        resource: { verb: 'get', group: '', resource: 'services', namespace, name: 'web' },
      });
      expect((await a.check('Bearer dev-token', svc('shop'))).ok).toBe(true);
      expect(await a.check('Bearer dev-token', svc('bank'))).toEqual({
        ok: false,
        status: 403,
        message: 'dev may not get services web in namespace bank',
      });
    } finally {
      ungrant();
    }
  });

  it('503, not cached, when the API server is away or refuses the agent the reviews; 200 once it is back', async () => {
    const a = fresh();
    await api.stop();
    try {
      expect(await a.check('Bearer prom-token', METRICS)).toMatchObject({
        ok: false,
        status: 503,
        message: expect.stringMatching(
          /^cannot check the token with the API server: POST \/apis\/authentication.k8s.io\/v1\/tokenreviews: /,
        ),
      });
    } finally {
      await api.start();
    }
    api.revokeReviews();
    try {
      expect(await a.check('Bearer prom-token', METRICS)).toMatchObject({
        ok: false,
        status: 503,
        message: expect.stringContaining(
          'User "tester" cannot create resource "tokenreviews" in API group "authentication.k8s.io"',
        ),
      });
    } finally {
      api.access.grant({
        subject: { user: 'tester' },
        rule: {
          verbs: ['create'],
          apiGroups: ['authentication.k8s.io', 'authorization.k8s.io'],
          resources: ['tokenreviews', 'subjectaccessreviews'],
        },
      });
    }
    expect((await a.check('Bearer prom-token', METRICS)).ok).toBe(true);
  });

  it('concurrent requests with one token share one review; the caches stay within their bound', async () => {
    const a = fresh({
      maxEntries: 3,
      limiter: new ReviewRateLimiter({ perSecond: 1000, burst: 1000 }, { perSecond: 1000, burst: 1000 }, () => now),
    });
    const all = await Promise.all(Array.from({ length: 20 }, () => a.check('Bearer prom-token', METRICS)));
    expect(all.every((d) => d.ok)).toBe(true);
    expect(a.reviews).toEqual({ token: 1, access: 1 });
    for (let i = 0; i < 10; i++) api.access.addToken(`t${i}`, { username: `u${i}` });
    for (let i = 0; i < 10; i++) await a.check(`Bearer t${i}`, METRICS);
    expect((a as unknown as { users: TtlCache<unknown> }).users.size).toBe(3);
    expect((a as unknown as { denied: TtlCache<unknown> }).denied.size).toBe(3);
  });

  // Issue 36, finding 3: garbage tokens amplified into TokenReviews and pushed Prometheus out.
  it("1,100 garbage tokens from one address cost 10 reviews (the rest 429 with Retry-After); Prometheus' answer stays cached", async () => {
    const a = fresh();
    expect((await a.check('Bearer prom-token', METRICS, '10.0.0.9')).ok).toBe(true);
    const before = a.reviews.token;
    const refused: number[] = [];
    for (let i = 0; i < 1100; i++) {
      const d = await a.check(`Bearer garbage-${i}`, METRICS, '10.1.2.3');
      if (!d.ok && d.status === 429) refused.push(d.retryAfterS);
    }
    expect(a.reviews.token - before).toBe(10);
    expect(refused).toHaveLength(1090);
    expect(refused.every((s) => s >= 1)).toBe(true);
    expect((await a.check('Bearer prom-token', METRICS, '10.0.0.9')).ok).toBe(true);
    expect(a.reviews.token - before).toBe(10);
  });

  it('strangers from many addresses share one global rate: 40 at once, then 5/s', async () => {
    const a = fresh();
    for (let i = 0; i < 1100; i++) await a.check(`Bearer garbage-${i}`, METRICS, `10.2.${i >> 8}.${i & 255}`);
    expect(a.reviews.token).toBe(40);
    now += 2000;
    for (let i = 0; i < 100; i++) await a.check(`Bearer later-${i}`, METRICS, `10.3.0.${i}`);
    expect(a.reviews.token).toBe(50);
  });

  it('rejected tokens live in a cache of their own: a full one never pushes out an accepted token', async () => {
    const a = fresh({
      maxEntries: 4,
      limiter: new ReviewRateLimiter({ perSecond: 1000, burst: 1000 }, { perSecond: 1000, burst: 1000 }, () => now),
    });
    expect((await a.check('Bearer prom-token', METRICS)).ok).toBe(true);
    for (let i = 0; i < 50; i++) expect(await a.check(`Bearer bad-${i}`, METRICS)).toMatchObject({ status: 401 });
    const tokenReviews = a.reviews.token;
    expect((await a.check('Bearer prom-token', METRICS)).ok).toBe(true);
    expect(a.reviews.token).toBe(tokenReviews);
  });

  it("Prometheus' renewal never waits behind strangers: its own lane, not rate-limited, while their reviews hang", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slowForStrangers = {
      reviewToken: async (token: string) => {
        if (token !== 'prom-token') await gate;
        return token === 'prom-token'
          ? { authenticated: true as const, user: PROM }
          : { authenticated: false as const, error: 'invalid' };
      },
      reviewAccess: async () => ({ allowed: true, reason: '' }),
    };
    const a = new KubeAuthorizer(slowForStrangers, { now: () => now, maxPending: 64 });
    expect((await a.check('Bearer prom-token', METRICS, '10.0.0.9')).ok).toBe(true);
    // 64 strangers' reviews waiting (as many as the old single queue held), every rate spent.
    const waiting = Array.from({ length: 64 }, (_, i) => a.check(`Bearer g${i}`, METRICS, `10.4.0.${i}`));
    now += 121_000; // past who-the-token-is's 2 minutes: Prometheus must be reviewed again
    const renewed = await a.check('Bearer prom-token', METRICS, '10.0.0.9');
    expect(renewed.ok).toBe(true);
    release();
    await Promise.all(waiting);
  });

  it('too many reviews waiting is a 503, not an unbounded queue of API calls', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slow = {
      reviewToken: async () => (await gate, { authenticated: false as const, error: 'x' }),
      reviewAccess: async () => ({ allowed: false, reason: '' }),
    };
    const a = new KubeAuthorizer(slow, { maxPending: 2 });
    const waiting = [a.check('Bearer a', METRICS), a.check('Bearer b', METRICS)];
    expect(await a.check('Bearer c', METRICS)).toMatchObject({
      ok: false,
      status: 503,
      message: expect.stringContaining('2 reviews already waiting'),
    });
    release();
    expect((await Promise.all(waiting)).map((d) => !d.ok && d.status)).toEqual([401, 401]);
  });
});

describe('review answers', () => {
  it('anything but a well-formed authenticated status is not authenticated, or an error', () => {
    expect(parseTokenReview({ status: { user: {} } })).toEqual({
      authenticated: false,
      error: 'token not authenticated',
    });
    expect(parseTokenReview({ status: { authenticated: false, error: 'expired', user: { username: 'x' } } })).toEqual({
      authenticated: false,
      error: 'expired',
    });
    expect(parseTokenReview({ status: { authenticated: 'true', user: { username: 'x' } } }).authenticated).toBe(false);
    for (const bad of [
      null,
      'x',
      [],
      {},
      { status: null },
      { status: { authenticated: true, user: {} } },
      { status: { authenticated: true, user: { username: 7 } } },
    ]) {
      expect(() => parseTokenReview(bad)).toThrow(ReviewError);
    }
    expect(
      parseTokenReview({
        status: {
          authenticated: true,
          user: { username: 'u', groups: ['g', 3, null], extra: { k: ['v', 1], j: 'no' } },
        },
      }),
    ).toEqual({
      authenticated: true,
      user: { username: 'u', groups: ['g'], extra: { k: ['v'], j: [] } },
    });
  });

  it('only allowed: true (and not denied) allows', () => {
    expect(parseAccessReview({ status: { allowed: true, reason: 'RBAC: ok' } })).toEqual({
      allowed: true,
      reason: 'RBAC: ok',
    });
    expect(parseAccessReview({ status: { allowed: true, denied: true } }).allowed).toBe(false);
    expect(parseAccessReview({ status: { allowed: 1 } }).allowed).toBe(false);
    expect(parseAccessReview({ status: { allowed: false, evaluationError: 'webhook down' } })).toEqual({
      allowed: false,
      reason: 'webhook down',
    });
    expect(() => parseAccessReview({ spec: {} })).toThrow(ReviewError);
  });

  it('bearer header parsing', () => {
    expect(bearerToken('Bearer abc')).toEqual({ token: 'abc' });
    expect(bearerToken('BEARER\tabc ')).toEqual({ token: 'abc' });
    expect(bearerToken('Bearer a b')).toHaveProperty('error');
    expect(bearerToken('Bearer ')).toHaveProperty('error');
  });
});
