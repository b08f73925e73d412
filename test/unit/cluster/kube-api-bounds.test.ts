// Hostile or broken API servers (a real HTTP server on loopback): an ERROR event without a Status,
// a watch line that never ends, an oversized list body. Each must end in a clear error that the
// reflector retries from, never a crash of the process or a heap that grows without bound.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { SkippedObject } from '../../../src/cluster/json-reduce.js';
import { type ApiError, KubeApi, parseWatchLine } from '../../../src/cluster/kube-api.js';
import { OBJECT_SHAPES } from '../../../src/cluster/object-shapes.js';
import { Reflector } from '../../../src/cluster/reflector.js';
import { until } from '../../support/wait.js';

type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void;

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

async function serve(handler: Handler): Promise<string> {
  const s = createServer((req, res) => handler(req, res, new URL(req.url ?? '/', 'http://x')));
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

const target = (server: string) => ({ server, source: 'test', requestOptions: async () => ({}) });
/** A reflector of Services from the API server at `url`, with short backoffs. */
const servicesReflector = (url: string) =>
  new Reflector(new KubeApi(target(url)), {
    name: 'services',
    path: '/api/v1/services',
    pageSize: 10,
    watchTimeoutS: 30,
    backoffInitialMs: 20,
    backoffMaxMs: 50,
    transform: (o) => o,
    onChange: () => {},
  });
const list = (rv: string) =>
  JSON.stringify({
    kind: 'List',
    metadata: { resourceVersion: rv },
    items: [{ metadata: { name: 'a', namespace: 'ns', resourceVersion: rv } }],
  });

describe('watch streams from a hostile API server', () => {
  it('an ERROR event without an object ends the watch with a reason; the reflector keeps going', async () => {
    let watches = 0;
    const url = await serve((_req, res, u) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      if (u.searchParams.get('watch') !== 'true') return res.end(list('5'));
      watches++;
      res.write('{"type":"ERROR"}\n');
    });
    const r = servicesReflector(url);
    const running = r.run();
    try {
      await until('three watch attempts (the reflector survived the first)', 5000, () =>
        watches >= 3 ? true : undefined,
      );
      expect(r.health()).toMatchObject({
        synced: true,
        healthy: false,
        reason: 'services: watch error: no Status object',
      });
      expect(r.store.size).toBe(1);
    } finally {
      r.stop();
      await running;
    }
  });

  it('an event that never ends is cut at maxEventBytes with a clear error', async () => {
    let sent = 0;
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n{"type":"ADDED","object":{"metadata":{"name":"');
      const chunk = Buffer.alloc(64 << 10, 0x61);
      const pump = (): void => {
        while (!res.destroyed && sent < 256 << 20) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
      };
      res.on('close', () => res.off('drain', pump));
      pump();
    });
    const api = new KubeApi(target(url), { maxEventBytes: 1 << 20 });
    const events: string[] = [];
    const ended = new Promise<ApiError | undefined>((resolve) => {
      void api.watch('/api/v1/services', { timeoutSeconds: '30' }, (type) => events.push(type), resolve);
    });
    const err = await ended;
    expect(events).toEqual(['ADDED']);
    expect(err?.message).toBe('watch /api/v1/services: the value at byte 52 is longer than 1 MiB');
    // Cut near the bound: what was sent is the bound plus what sat in socket buffers, not 256 MiB.
    expect(sent).toBeLessThan(16 << 20);
  });

  it('a line that is not JSON ends the watch with where it went wrong; the events before it were delivered', async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200);
      res.write('{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n<html>proxy error</html>\n');
    });
    const events: string[] = [];
    const err = await new Promise<ApiError | undefined>((resolve) => {
      void new KubeApi(target(url)).watch('/x', {}, (type) => events.push(type), resolve);
    });
    expect(events).toEqual(['ADDED']);
    expect(err?.message).toBe("watch /x: not JSON at byte 52: expected a value, got '<'");
  });

  it('an event the consumer throws on ends the watch with the reason, not the process', async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200);
      res.write('{"type":"ADDED","object":null}\n{"type":"ADDED","object":{}}\n');
    });
    const api = new KubeApi(target(url));
    const err = await new Promise<ApiError | undefined>((resolve) => {
      void api.watch(
        '/x',
        {},
        (_t, o) => {
          if (o === null) throw new TypeError('boom');
        },
        resolve,
      );
    });
    expect(err?.message).toBe('watch /x: a ADDED event could not be applied: boom');
  });
});

describe('API bodies are bounded', () => {
  for (const chunked of [false, true]) {
    it(`a list page over maxBodyBytes fails clearly (${chunked ? 'chunked' : 'Content-Length'})`, async () => {
      const body = JSON.stringify({ metadata: { resourceVersion: '1' }, items: [{ pad: 'x'.repeat(3 << 20) }] });
      const url = await serve((_req, res) => {
        res.writeHead(200, chunked ? {} : { 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
      const api = new KubeApi(target(url), { maxBodyBytes: 1 << 20 });
      await expect(api.listPage('/api/v1/services', {})).rejects.toThrow(
        'GET /api/v1/services: the answer is larger than 1 MiB',
      );
      // A bound under 1 MiB is said in KiB or bytes, not as "0 MiB".
      for (const [maxBodyBytes, said] of [
        [48 << 10, '48 KiB'],
        [1000, '1000 bytes'],
      ] as const) {
        await expect(new KubeApi(target(url), { maxBodyBytes }).listPage('/api/v1/services', {})).rejects.toThrow(
          `GET /api/v1/services: the answer is larger than ${said}`,
        );
      }
      // Under the bound: read whole, multi-byte characters split across pieces intact.
      const ok = await new KubeApi(target(url), { maxBodyBytes: 4 << 20 }).listPage('/api/v1/services', {});
      expect(ok.items).toHaveLength(1);
    });
  }
});

describe('list pages read as streams, reduced to a shape', () => {
  const svc = (name: string, blob = '') => ({
    metadata: { name, namespace: 'ns', annotations: blob ? { 'example.com/blob': blob } : {} },
    spec: { ports: [{ port: 80 }] },
  });
  /** Serves `body` in pieces of `piece` bytes, each in its own write. */
  const pieces = (body: string, piece: number) =>
    serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const b = Buffer.from(body);
      for (let i = 0; i < b.length; i += piece) res.write(b.subarray(i, i + piece));
      res.end();
    });

  it('a page far over maxBodyBytes is read, its fat object skipped by name and the others kept', async () => {
    const items = [svc('a'), svc('fat', 'x'.repeat(3 << 20)), svc('c')];
    const url = await pieces(JSON.stringify({ metadata: { resourceVersion: '5', continue: 'next' }, items }), 1000);
    const page = await new KubeApi(target(url), { maxBodyBytes: 1 << 20 }).listPage(
      '/api/v1/services',
      {},
      30_000,
      OBJECT_SHAPES.services,
    );
    expect(page).toMatchObject({ resourceVersion: '5', continueToken: 'next' });
    expect(
      page.items.map((i) =>
        i instanceof SkippedObject ? i.label : (i as { metadata: { name: string } }).metadata.name,
      ),
    ).toEqual(['a', 'Service ns/fat', 'c']);
    expect((page.items[1] as SkippedObject).reason).toBe(
      `metadata.annotations["example.com/blob"] is ${3 << 20} bytes, more than the 16 KiB kept of a value`,
    );
    expect(page.items[0]).toEqual({
      metadata: { name: 'a', namespace: 'ns', annotations: {} },
      spec: { ports: [{ port: 80 }] },
    });
  });

  it('a page cut short, or not JSON, fails with the reason (the reflector keeps its store and retries)', async () => {
    const text = JSON.stringify({ metadata: { resourceVersion: '5' }, items: [svc('a'), svc('b')] });
    const cut = await serve((_req, res) => {
      res.writeHead(200, { 'content-length': text.length });
      res.write(text.slice(0, 60), () => res.destroy());
    });
    await expect(
      new KubeApi(target(cut)).listPage('/api/v1/services', {}, 30_000, OBJECT_SHAPES.services),
    ).rejects.toThrow(/^GET \/api\/v1\/services: connection to the API server lost/);
    const bad = await pieces(text.replace('"b"', 'b"'), 7);
    await expect(
      new KubeApi(target(bad)).listPage('/api/v1/services', {}, 30_000, OBJECT_SHAPES.services),
    ).rejects.toThrow(/^GET \/api\/v1\/services: not JSON at byte \d+: expected a value, got 'b'$/);
    const notList = await pieces('{"kind":"Status","code":200}', 3);
    await expect(
      new KubeApi(target(notList)).listPage('/api/v1/services', {}, 30_000, OBJECT_SHAPES.services),
    ).rejects.toThrow('GET /api/v1/services: the answer is not a list');
  });
});

describe('parseWatchLine', () => {
  it('gives the event, nothing for a blank line, or why the line is not one', () => {
    expect(parseWatchLine('{"type":"ADDED","object":{"a":1}}')).toEqual({ type: 'ADDED', object: { a: 1 } });
    expect(parseWatchLine('  ')).toBeUndefined();
    expect(parseWatchLine('null')).toBe('an event has no type (null)');
    expect(parseWatchLine('[1]')).toBe('an event has no type ([1])');
    expect(parseWatchLine('{"type":')).toBe('an event is not JSON ({"type":)');
  });
});

describe('a reflector stopped while the API server has not answered', () => {
  it('closes its watch connection at once', async () => {
    const open = new Set<IncomingMessage>();
    const url = await serve((req, res, u) => {
      if (u.searchParams.get('watch') !== 'true') return res.writeHead(200).end(list('5'));
      // The head of the watch answer never comes.
      open.add(req);
      req.on('close', () => open.delete(req));
    });
    const r = servicesReflector(url);
    const running = r.run();
    await until('the watch request', 5000, () => (open.size === 1 ? true : undefined));
    r.stop();
    await running;
    await until('the watch connection closed', 2000, () => (open.size === 0 ? true : undefined));
  });
});
