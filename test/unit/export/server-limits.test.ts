// The metrics server against clients that misbehave (issue 16, defect 5): silent connections,
// headers sent a byte at a time, a /metrics reader that never reads, more connections than the cap.
import { request } from 'node:http';
import { type AddressInfo, createConnection, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createAgentRegistry } from '../../../src/agent/metrics/list.js';
import { createMetricsServer } from '../../../src/export/server.js';
import type { ServerLimits } from '../../../src/http-limits.js';
import { testAgentState, toLb } from '../../support/metrics-state.js';

// 20,000 active Service ports: a body larger than the socket takes at once.
const t = testAgentState(20_000);
t.counter.samples = Array.from({ length: 20_000 }, (_, i) => toLb(i, i + 1));

const cleanups: (() => void)[] = [];
afterEach(() => cleanups.splice(0).forEach((c) => c()));

async function start(limits: Partial<ServerLimits>) {
  const server = createMetricsServer(
    {
      registry: createAgentRegistry(() => t.state, { maxServicePorts: 100_000, processMetrics: false }),
      ready: () => true,
    },
    limits,
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const socks: Socket[] = [];
  cleanups.push(() => {
    for (const s of socks) s.destroy();
    server.closeAllConnections();
    server.close();
  });
  const open = (): Promise<Socket> =>
    new Promise((resolve, reject) => {
      const s = createConnection(port, '127.0.0.1');
      socks.push(s);
      s.on('error', () => {});
      s.once('connect', () => resolve(s));
      s.once('error', reject);
    });
  const closedWithin = (s: Socket, ms: number): Promise<number> =>
    new Promise((resolve, reject) => {
      const t0 = Date.now();
      if (s.destroyed) return resolve(0);
      const t = setTimeout(() => reject(new Error(`still open after ${ms} ms`)), ms);
      s.once('close', () => (clearTimeout(t), resolve(Date.now() - t0)));
      s.resume();
    });
  const healthz = (): Promise<number> =>
    new Promise((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port, path: '/healthz', agent: false },
        (res) => (res.resume(), resolve(res.statusCode!)),
      );
      req.on('error', reject);
      req.end();
    });
  return { server, port, open, closedWithin, healthz };
}

describe('metrics server limits', () => {
  it('a client that sends its headers a byte at a time is closed after headersTimeoutMs', async () => {
    const { open, closedWithin } = await start({ headersTimeoutMs: 300 });
    const s = await open();
    s.write('GET /metrics HTTP/1.1\r\nHost: x\r\n');
    const drip = setInterval(() => s.writable && s.write('X'), 50);
    cleanups.push(() => clearInterval(drip));
    expect(await closedWithin(s, 3000)).toBeLessThan(3000);
  });

  it('a connection that says nothing is closed after the stall timeout', async () => {
    const { open, closedWithin } = await start({
      stallTimeoutMs: 300,
      headersTimeoutMs: 60_000,
      requestTimeoutMs: 120_000,
    });
    expect(await closedWithin(await open(), 3000)).toBeLessThan(3000);
  });

  it('a /metrics client that never reads is dropped after the stall timeout', async () => {
    const { open, server } = await start({ stallTimeoutMs: 500 });
    const accepted: Socket[] = [];
    server.prependListener('connection', (x: Socket) => accepted.push(x));
    const s = await open();
    s.pause();
    s.write('GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n');
    // The client never reads, so it would not see the close: the server's side is watched, from the
    // moment the body waits in its socket (rendering 20,000 ports first takes seconds on a loaded box).
    const served = accepted[0]!;
    let waitingSince: number | undefined;
    const poll = setInterval(() => {
      if (waitingSince === undefined && served.writableLength > 0) waitingSince = Date.now();
    }, 10);
    cleanups.push(() => clearInterval(poll));
    await new Promise((r) => (served.destroyed ? r(0) : served.once('close', r)));
    clearInterval(poll);
    expect(waitingSince).toBeDefined();
    // The watchdog looks every stall timeout, so it sees no progress within two of them.
    expect(Date.now() - waitingSince!).toBeLessThan(2 * 500 + 2000);
    expect(served.bytesWritten).toBeGreaterThan(100_000);
  });

  it('at the connection cap the oldest silent one gives way: /healthz still answers', async () => {
    const { open, healthz, server } = await start({ maxConnections: 32 });
    const silent = await Promise.all(Array.from({ length: 32 }, () => open()));
    const firstClosed = new Promise((r) => silent[0]!.once('close', r));
    expect(await healthz()).toBe(200);
    await firstClosed;
    // More silent ones: each new one evicts the oldest; the server never holds more than the cap.
    await Promise.all(Array.from({ length: 100 }, () => open()));
    expect(await healthz()).toBe(200);
    expect(await new Promise((r) => server.getConnections((_e, n) => r(n)))).toBeLessThanOrEqual(32);
  });
});
