import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson } from '../../../src/cluster/api-post.js';
import type { ApiTarget } from '../../../src/cluster/kube-config.js';

describe('postJson', () => {
  let server: Server;
  let target: ApiTarget;
  const received: { path: string; type: string; body: unknown }[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString('utf8')));
      req.on('end', () => {
        received.push({ path: req.url ?? '', type: req.headers['content-type'] ?? '', body: JSON.parse(body) });
        if (req.url === '/big') return res.writeHead(201).end('x'.repeat(10_000));
        if (req.url === '/silent') return;
        if (req.url === '/auth') return res.writeHead(req.headers.authorization === 'Bearer new' ? 201 : 401).end();
        res.writeHead(409).end('{"reason":"AlreadyExists"}');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    target = { server: `http://127.0.0.1:${port}`, source: 'test', requestOptions: async () => ({}) };
  });
  afterAll(() => {
    server.closeAllConnections();
    server.close();
  });

  it('sends the object as JSON and gives back the status and text', async () => {
    const reply = await postJson(
      target,
      '/small',
      { kind: 'Event' },
      { timeoutMs: 2000, maxBytes: 100, overflow: 'fail' },
    );
    expect(reply).toEqual({ status: 409, text: '{"reason":"AlreadyExists"}' });
    expect(received.at(-1)).toEqual({ path: '/small', type: 'application/json', body: { kind: 'Event' } });
  });

  it('a 401 to a credential the target drops: posted once more with the next one', async () => {
    const tokens = ['old', 'new'];
    const refused: string[] = [];
    const renewing: ApiTarget = {
      server: target.server,
      source: 'test',
      requestOptions: async () => ({ headers: { authorization: `Bearer ${tokens.shift() ?? 'none'}` } }),
      refused: (options) => {
        refused.push(String((options.headers as Record<string, string>).authorization));
        return true;
      },
    };
    const bounds = { timeoutMs: 2000, maxBytes: 100, overflow: 'fail' } as const;
    expect(await postJson(renewing, '/auth', {}, bounds)).toEqual({ status: 201, text: '' });
    expect(refused).toEqual(['Bearer old']);
    // A target without renewal (a static token) gets the 401 back, once.
    expect(await postJson(target, '/auth', {}, bounds)).toEqual({ status: 401, text: '' });
  });

  it('fails an answer past the bound, or cuts it', async () => {
    const bounds = { timeoutMs: 2000, maxBytes: 100 };
    await expect(postJson(target, '/big', {}, { ...bounds, overflow: 'fail' })).rejects.toThrow(
      'answer larger than 100 bytes',
    );
    const cut = await postJson(target, '/big', {}, { ...bounds, overflow: 'cut' });
    expect(cut.status).toBe(201);
    expect(cut.text.length).toBeGreaterThan(0);
    expect('x'.repeat(10_000).startsWith(cut.text)).toBe(true);
  });

  it('fails when the API server does not answer in time', async () => {
    await expect(postJson(target, '/silent', {}, { timeoutMs: 200, maxBytes: 100, overflow: 'fail' })).rejects.toThrow(
      'no answer within 0.2 s',
    );
  });
});
