import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgentRegistry } from '../../../src/agent/metrics/list.js';
import { acceptsGzip, createMetricsServer } from '../../../src/export/server.js';
import { parseListen } from '../../../src/http-limits.js';
import { testAgentState, toLb } from '../../support/metrics-state.js';

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

describe('metrics server', () => {
  const t = testAgentState(2000);
  t.counter.samples = Array.from({ length: 2000 }, (_, i) => toLb(i, i + 1));
  let ready = false;
  const server = createMetricsServer({
    registry: createAgentRegistry(() => t.state, { maxServicePorts: 10_000, processMetrics: true }),
    ready: () => ready,
  });
  let port = 0;
  beforeAll(
    () =>
      new Promise<void>((ok) =>
        server.listen(0, '127.0.0.1', () => ((port = (server.address() as AddressInfo).port), ok())),
      ),
  );
  afterAll(() => new Promise<void>((ok) => server.close(() => ok())));
  const get = (path: string, headers: Record<string, string> = {}, method = 'GET') =>
    new Promise<Reply>((ok, fail) => {
      const req = request({ host: '127.0.0.1', port, path, method, headers }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (b: Buffer) => parts.push(b));
        res.on('end', () => ok({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts) }));
      });
      req.on('error', fail);
      req.end();
    });

  it('serves the same text plain and gzipped, as the client asks, with the right lengths', async () => {
    const plain = await get('/metrics');
    expect(plain.status).toBe(200);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.headers['content-type']).toContain('text/plain');
    expect(Number(plain.headers['content-length'])).toBe(plain.body.length);
    const text = plain.body.toString();
    expect(text).toContain(
      'clbprobe_lb_path_packets_total{namespace="shop",service="s1999",port="80",protocol="TCP",kind="to_lb"} 2000\n',
    );
    expect(text).toContain('process_cpu_user_seconds_total');
    // What Prometheus sends.
    const gz = await get('/metrics', { 'Accept-Encoding': 'gzip' });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gz.headers.vary).toBe('Accept-Encoding');
    expect(Number(gz.headers['content-length'])).toBe(gz.body.length);
    expect(gz.body.length).toBeLessThan(plain.body.length / 4);
    const unzipped = gunzipSync(gz.body).toString();
    // Process metrics move between two scrapes; everything before them is the same.
    const ours = (t: string) => t.slice(0, t.indexOf('# HELP process_'));
    expect(ours(unzipped)).toBe(ours(text));
    expect(ours(text).length).toBeGreaterThan(100_000);
    const head = await get('/metrics', { 'Accept-Encoding': 'gzip' }, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.body.length).toBe(0);
    expect(Number(head.headers['content-length'])).toBeGreaterThan(0);
  });

  it('answers /healthz, /readyz by readiness, and refuses other paths and methods', async () => {
    expect((await get('/healthz')).status).toBe(200);
    expect((await get('/readyz')).status).toBe(503);
    ready = true;
    expect((await get('/readyz')).status).toBe(200);
    expect((await get('/nothing')).status).toBe(404);
    expect((await get('/metrics', {}, 'POST')).status).toBe(405);
  });
});

describe('metrics server, plain body larger than the socket takes at once', () => {
  // ~13 MB of text, 20,000 Service ports active over the default cap: the server must wait for the socket to drain.
  const t = testAgentState(20_000);
  t.counter.samples = Array.from({ length: 20_000 }, (_, i) => toLb(i, i + 1));
  const server = createMetricsServer({
    registry: createAgentRegistry(() => t.state, { maxServicePorts: 100_000, processMetrics: false }),
    ready: () => true,
  });
  let port = 0;
  beforeAll(
    () =>
      new Promise<void>((ok) =>
        server.listen(0, '127.0.0.1', () => ((port = (server.address() as AddressInfo).port), ok())),
      ),
  );
  afterAll(() => new Promise<void>((ok) => server.close(() => ok())));

  /** GET /metrics, reading nothing for `stallMs` after the first bytes; `abort` hangs up there instead. */
  const slowGet = (stallMs: number, abort = false) =>
    new Promise<{ length: number; body: Buffer }>((ok, fail) => {
      const req = request({ host: '127.0.0.1', port, path: '/metrics' }, (res) => {
        const parts: Buffer[] = [];
        res.once('data', () => {
          if (abort) {
            req.destroy();
            ok({ length: 0, body: Buffer.alloc(0) });
            return;
          }
          res.pause();
          setTimeout(() => res.resume(), stallMs);
        });
        res.on('data', (b: Buffer) => parts.push(b));
        res.on('end', () => ok({ length: Number(res.headers['content-length']), body: Buffer.concat(parts) }));
      });
      req.on('error', (e) => (abort ? undefined : fail(e)));
      req.end();
    });

  it('streams the whole text to a client that stalls, and survives one that hangs up', async () => {
    const slow = await slowGet(300);
    expect(slow.length).toBeGreaterThan(5_000_000);
    expect(slow.body.length).toBe(slow.length);
    const text = slow.body.toString();
    expect(text).toContain('service="s19999",port="80",protocol="TCP",kind="to_lb"} 20000\n');
    expect(text.endsWith('\n')).toBe(true);
    await slowGet(0, true);
    const again = await slowGet(0);
    expect(again.body.toString()).toBe(text);
  });
});

describe('acceptsGzip', () => {
  it.each([
    ['gzip', true],
    ['gzip, deflate', true],
    ['deflate, GZIP;q=0.5', true],
    ['x-gzip', true],
    ['*', true],
    ['identity', false],
    ['', false],
    ['gzip;q=0', false],
    ['*;q=0', false],
    ['gzip;q=0, *', false],
    ['br, *;q=0.1', true],
  ])('%j -> %s', (header, ok) => expect(acceptsGzip(header)).toBe(ok));
  it('takes repeated headers and no header', () => {
    expect(acceptsGzip(['identity', 'gzip'])).toBe(true);
    expect(acceptsGzip(undefined)).toBe(false);
  });
});

describe('parseListen', () => {
  it('reads host:port, :port, port and [v6]:port, and names a bad port', () => {
    expect(parseListen('127.0.0.1:9811')).toEqual({ host: '127.0.0.1', port: 9811 });
    expect(parseListen(':9811')).toEqual({ port: 9811 });
    expect(parseListen('9811')).toEqual({ port: 9811 });
    expect(parseListen('[::1]:9811')).toEqual({ host: '::1', port: 9811 });
    expect(() => parseListen('host:http')).toThrow(/--listen: bad port/);
    expect(() => parseListen(':70000')).toThrow(/bad port/);
  });
});

describe('metrics server with an authorizer (--metrics-auth kubernetes)', () => {
  const asked: string[] = [];
  const server = createMetricsServer({
    registry: createAgentRegistry(() => testAgentState(1).state, { maxServicePorts: 10, processMetrics: false }),
    ready: () => true,
    authorize: async (req) => {
      asked.push(req.url ?? '');
      const h = req.headers.authorization;
      if (h === 'Bearer good') return { ok: true };
      return h
        ? { ok: false, status: 403, message: 'dev may not get /metrics' }
        : { ok: false, status: 401, message: 'no bearer token' };
    },
  });
  let port = 0;
  beforeAll(
    () =>
      new Promise<void>((ok) =>
        server.listen(0, '127.0.0.1', () => ((port = (server.address() as AddressInfo).port), ok())),
      ),
  );
  afterAll(() => new Promise<void>((ok) => server.close(() => ok())));
  const get = (path: string, headers: Record<string, string> = {}) =>
    new Promise<Reply>((ok, fail) => {
      const req = request({ host: '127.0.0.1', port, path, headers }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (b: Buffer) => parts.push(b));
        res.on('end', () => ok({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts) }));
      });
      req.on('error', fail);
      req.end();
    });

  it('/metrics: 401 with the Bearer scheme, 403 with the reason, 200 for an allowed token; probes never ask', async () => {
    const none = await get('/metrics');
    expect([none.status, none.headers['www-authenticate'], none.body.toString()]).toEqual([
      401,
      'Bearer realm="clbprobe"',
      'no bearer token\n',
    ]);
    const denied = await get('/metrics?x=1', { Authorization: 'Bearer dev' });
    expect([denied.status, denied.body.toString()]).toEqual([403, 'dev may not get /metrics\n']);
    expect(denied.headers['www-authenticate']).toBeUndefined();
    const ok = await get('/metrics', { Authorization: 'Bearer good' });
    expect(ok.status).toBe(200);
    expect(ok.body.toString()).toContain('clbprobe_build_info');
    expect(asked).toEqual(['/metrics', '/metrics?x=1', '/metrics']);
    expect((await get('/healthz')).status).toBe(200);
    expect((await get('/readyz')).status).toBe(200);
    expect(asked).toHaveLength(3);
  });
});
