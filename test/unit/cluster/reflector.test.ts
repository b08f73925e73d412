// The reflector against a scripted KubeApi: what each list or watch answers, in order.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApiError, type KubeApi } from '../../../src/cluster/kube-api.js';
import { KIND_APIS } from '../../../src/cluster/objects.js';
import { Reflector, type ReflectorOptions } from '../../../src/cluster/reflector.js';
import { collection } from '../../../src/cluster/watch.js';

type ListAnswer = { items: unknown[] } | ApiError;

/** A KubeApi whose lists answer `lists(path, n)` (n counts from 1) and whose watches end as `watchEnd` says. */
class ScriptedApi {
  readonly listed: string[] = [];
  readonly openWatches = new Set<string>();

  readonly discovered: string[] = [];

  constructor(
    private readonly lists: (path: string, n: number) => ListAnswer,
    private readonly watchEnd: (n: number) => ApiError | undefined = () => undefined,
    private readonly groupServed = true,
  ) {}

  async serves(path: string) {
    this.discovered.push(path);
    return this.groupServed;
  }

  async listPage(path: string) {
    this.listed.push(path);
    const answer = this.lists(path, this.listed.length);
    if (answer instanceof ApiError) throw answer;
    return { resourceVersion: String(this.listed.length), items: answer.items, continueToken: undefined };
  }

  async watch(path: string, _q: unknown, _on: unknown, onEnd: (e?: ApiError) => void) {
    const end = this.watchEnd(this.listed.length);
    if (end) setTimeout(() => onEnd(end), 5);
    else this.openWatches.add(path);
    return () => this.openWatches.delete(path);
  }
}

const notFound = (path: string) =>
  new ApiError(`GET ${path}: 404 NotFound: the server could not find the resource`, 404);
const gone = () => new ApiError('watch: 410 Gone', 410);
const gateway = { metadata: { name: 'gw', namespace: 'infra' } };
const GATEWAYS = '/apis/gateway.networking.k8s.io/v1/gateways';

const running: Reflector<unknown>[] = [];
afterEach(() => {
  for (const r of running.splice(0)) r.stop();
});

function start(api: ScriptedApi, options: Partial<ReflectorOptions<unknown>> = {}): Reflector<unknown> {
  const r = new Reflector(api as unknown as KubeApi, {
    name: 'gateways',
    path: GATEWAYS,
    optional: true,
    crd: true,
    pageSize: 500,
    watchTimeoutS: 300,
    backoffInitialMs: 20,
    backoffMaxMs: 40,
    absentRecheckMs: 600_000,
    transform: (o) => o,
    onChange: () => {},
    ...options,
  });
  running.push(r);
  void r.run();
  return r;
}

async function waitFor(ok: () => boolean, what: string, timeoutMs = 2000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('Reflector of a CRD kind', () => {
  it('404 before any list: not installed, synced empty and absent, listed again only after absentRecheckMs', async () => {
    const api = new ScriptedApi(notFound);
    const r = start(api);
    await waitFor(() => r.health().synced, 'synced');
    expect(r.health()).toMatchObject({ synced: true, healthy: true, absent: true });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(api.listed).toHaveLength(1);
  });

  it('404 on a relist after a good list: a failure that keeps the objects and retries with backoff, not absent', async () => {
    // List 1 has the Gateway; its watch ends with 410; relist 2 is 404 (API server restarted, CRDs not loaded yet).
    const api = new ScriptedApi(
      (path, n) => (n === 2 ? notFound(path) : { items: [gateway] }),
      (n) => (n === 1 ? gone() : undefined),
    );
    const r = start(api);
    await waitFor(() => api.listed.length >= 2, 'the relist');
    await waitFor(() => !r.health().healthy, 'unhealthy');
    expect(r.health()).toMatchObject({ synced: true, healthy: false });
    expect(r.health().absent).toBeUndefined();
    expect(r.health().reason).toMatch(/^gateways: GET .*gateways: 404/);
    expect(r.store.size).toBe(1);
    // The next list (after backoff, not 10 minutes) finds the CRD back.
    await waitFor(() => api.listed.length >= 3 && r.health().healthy, 'relisted');
    expect(r.store.size).toBe(1);
  });
});

describe('Reflector of a CRD kind that is uninstalled', () => {
  it('a 404 that lasts past crdGoneAfterMs after a good list: not installed, the objects dropped', async () => {
    const api = new ScriptedApi(
      (path, n) => (n >= 2 ? notFound(path) : { items: [gateway] }),
      (n) => (n === 1 ? gone() : undefined),
    );
    const r = start(api, { crdGoneAfterMs: 100 });
    await waitFor(() => api.listed.length >= 2 && !r.health().healthy, 'the first 404');
    expect(r.store.size).toBe(1);
    await waitFor(() => r.health().absent === true, 'absent');
    expect(r.health()).toMatchObject({ synced: true, healthy: true, absent: true });
    expect(r.store.size).toBe(0);
  });
});

describe('Reflector of a kind served at another version', () => {
  it('GRPCRoutes on Gateway API v1.0 (v1alpha2 only): listed and watched at v1alpha2, no note, not absent', async () => {
    const grpcRoute = { metadata: { name: 'r', namespace: 'shop' } };
    const api = new ScriptedApi((path) => (path.includes('/v1alpha2/') ? { items: [grpcRoute] } : notFound(path)));
    const r = start(api, collection(KIND_APIS.grpcRoutes));
    await waitFor(() => api.openWatches.size === 1, 'the watch');
    expect(api.listed).toEqual([
      '/apis/gateway.networking.k8s.io/v1/grpcroutes',
      '/apis/gateway.networking.k8s.io/v1alpha2/grpcroutes',
    ]);
    expect([...api.openWatches]).toEqual(['/apis/gateway.networking.k8s.io/v1alpha2/grpcroutes']);
    expect(r.store.size).toBe(1);
    expect(r.health()).toMatchObject({ synced: true, healthy: true });
    expect(r.health().absent).toBeUndefined();
    expect(r.health().reason).toBeUndefined();
  });

  it('HTTPRoutes on Gateway API v0.8 (v1beta1 only): listed at v1beta1', async () => {
    const api = new ScriptedApi((path) => (path.includes('/v1beta1/') ? { items: [gateway] } : notFound(path)));
    const r = start(api, collection(KIND_APIS.httpRoutes));
    await waitFor(() => r.health().synced, 'synced');
    expect(api.listed.at(-1)).toBe('/apis/gateway.networking.k8s.io/v1beta1/httproutes');
    expect(r.store.size).toBe(1);
  });

  it('no version served and never listed: absent, each version tried once, no fallback logged', async () => {
    const api = new ScriptedApi(notFound);
    const logged: string[] = [];
    const r = start(api, { ...collection(KIND_APIS.tlsRoutes), onFallback: (m) => logged.push(m) });
    await waitFor(() => r.health().synced, 'synced');
    expect(r.health()).toMatchObject({ healthy: true, absent: true });
    expect(api.listed.map((p) => p.split('/')[3])).toEqual(['v1alpha2', 'v1alpha3', 'v1']);
    expect(logged).toEqual([]);
  });

  it('the Gateway API group not served at all (no CRD installed): absent after the first version, asked once', async () => {
    const api = new ScriptedApi(notFound, undefined, false);
    const r = start(api, collection(KIND_APIS.tlsRoutes));
    await waitFor(() => r.health().synced, 'synced');
    expect(r.health()).toMatchObject({ healthy: true, absent: true });
    expect(api.listed).toEqual(['/apis/gateway.networking.k8s.io/v1alpha2/tlsroutes']);
    expect(api.discovered).toEqual(['/apis/gateway.networking.k8s.io']);
  });
});

describe('Reflector.stop', () => {
  afterEach(() => vi.useRealTimers());

  /** A Services reflector on `api`, whose requests record the signal they were given. */
  function services(api: object): Reflector<unknown> {
    return new Reflector(api as KubeApi, {
      name: 'services',
      path: '/api/v1/services',
      pageSize: 500,
      watchTimeoutS: 300,
      backoffInitialMs: 500,
      backoffMaxMs: 30_000,
      transform: (o) => o,
      onChange: () => {},
    });
  }
  const never = () => new Promise<never>(() => {});

  it('ends a watch still being opened: its request aborted, its idle timer cleared', async () => {
    vi.useFakeTimers();
    let signal: AbortSignal | undefined;
    const r = services({
      listPage: async () => ({ resourceVersion: '1', items: [], continueToken: undefined }),
      // The API server took the connection but has not answered yet.
      watch: (...args: unknown[]) => {
        signal = args[5] as AbortSignal;
        return never();
      },
    });
    const running = r.run();
    await vi.advanceTimersByTimeAsync(10);
    expect(signal?.aborted).toBe(false);
    expect(vi.getTimerCount()).toBe(1);
    r.stop();
    await running;
    expect(signal?.aborted).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('aborts a list in flight', async () => {
    let signal: AbortSignal | undefined;
    const r = services({
      listPage: (...args: unknown[]) => {
        signal = args[4] as AbortSignal;
        return never();
      },
    });
    const running = r.run();
    await waitFor(() => signal !== undefined, 'the list');
    r.stop();
    await running;
    expect(signal?.aborted).toBe(true);
  });
});
