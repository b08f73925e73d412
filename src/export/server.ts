// The metrics HTTP server: /metrics, /healthz (alive), /readyz (first sync
// done). Connection data is never served here (see src/agent/evidence-server.ts).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { promisify } from 'node:util';
import { gzip as gzipCallback } from 'node:zlib';
import type { Registry } from 'prom-client';

const gzip = promisify(gzipCallback);

export interface MetricsServerOptions {
  registry: Registry;
  /** True once every source has been read once. */
  ready: () => boolean;
  /**
   * Access control for /metrics (--metrics-auth kubernetes): resolves to ok, or to the status
   * and message to refuse with. /healthz and /readyz stay open for the kubelet's probes.
   */
  authorize?: (req: IncomingMessage) => Promise<{ ok: true } | { ok: false; status: number; message: string; retryAfterS?: number }>;
  /** More GET paths, each with its own access control (the agent's /evidence). */
  routes?: Record<string, (req: IncomingMessage, res: ServerResponse) => void>;
}

/** Answers with the authorizer's refusal, or passes the request on. */
function guarded(authorize: NonNullable<MetricsServerOptions['authorize']>, req: IncomingMessage, res: ServerResponse, next: () => void): void {
  authorize(req).then(
    (d) => {
      if (d.ok) return next();
      // RFC 6750: a 401 names the scheme to use.
      const scheme = d.status === 401 ? { 'WWW-Authenticate': 'Bearer realm="clbprobe"' } : undefined;
      const retry = d.retryAfterS ? { 'Retry-After': String(d.retryAfterS) } : undefined;
      res.writeHead(d.status, { 'Content-Type': 'text/plain; charset=utf-8', ...scheme, ...retry }).end(`${d.message}\n`);
    },
    (e: unknown) => res.writeHead(500).end(`${e instanceof Error ? e.message : String(e)}\n`),
  );
}

/** "host:port", ":port" (all addresses) or "port". */
export function parseListen(listen: string): { host?: string; port: number } {
  const i = listen.lastIndexOf(':');
  const host = i < 0 ? '' : listen.slice(0, i).replace(/^\[(.*)\]$/, '$1');
  const portText = i < 0 ? listen : listen.slice(i + 1);
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) throw new Error(`--listen: bad port in ${JSON.stringify(listen)}`);
  return host ? { host, port } : { port };
}

/**
 * Whether an Accept-Encoding header takes gzip (Prometheus always sends "gzip"): listed, or
 * covered by "*", and not with q=0 (RFC 9110 12.5.3).
 */
export function acceptsGzip(header: string | string[] | undefined): boolean {
  const items = (Array.isArray(header) ? header.join(',') : (header ?? '')).split(',');
  let star = false;
  for (const item of items) {
    const [coding = '', ...params] = item.split(';').map((x) => x.trim().toLowerCase());
    const q = params.find((p) => p.startsWith('q='));
    const ok = q === undefined || Number(q.slice(2)) > 0;
    if (coding === 'gzip' || coding === 'x-gzip') return ok;
    if (coding === '*') star = ok;
  }
  return star;
}

/**
 * Connection and time limits, so that clients that connect and say nothing, send headers a byte at
 * a time, or ask and never read cannot hold the agent's file descriptors and memory (without
 * limits, 18k of them add ~100 MB of RSS, and 20k use every descriptor: the sources then fail with
 * EMFILE).
 * Prometheus scrapes over one or two connections and the kubelet's probes open one each: 256 is
 * plenty. At the cap, the oldest connection that is not being served (between requests, still
 * sending its headers, or waiting for its reader) gives way to the new one, so a probe gets in
 * while hostile clients churn each other out.
 */
export interface ServerLimits {
  maxConnections: number;
  /** Time to send a request's headers. */
  headersTimeoutMs: number;
  /** Time to send a whole request. */
  requestTimeoutMs: number;
  /** Time a kept-alive connection may wait for its next request. */
  keepAliveTimeoutMs: number;
  /** Time a connection may make no progress at all (a reader that takes nothing). */
  stallTimeoutMs: number;
}

export const DEFAULT_SERVER_LIMITS: ServerLimits = {
  maxConnections: 256,
  headersTimeoutMs: 5_000,
  requestTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
  stallTimeoutMs: 30_000,
};

/** Applies `limits` to an HTTP server: the cap with eviction of the oldest connection not being served, and the timeouts. */
export function limitConnections(server: Server, limits: ServerLimits): void {
  server.headersTimeout = limits.headersTimeoutMs;
  server.requestTimeout = limits.requestTimeoutMs;
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.timeout = limits.stallTimeoutMs;
  // Insertion order is age; the value says whether a request is being served.
  const open = new Map<Socket, { serving: boolean }>();
  server.on('connection', (sock: Socket) => {
    if (open.size >= limits.maxConnections) {
      let victim: Socket | undefined;
      for (const [s, st] of open) {
        if (!st.serving || s.writableLength > 0) {
          victim = s;
          break;
        }
      }
      if (!victim) return void sock.destroy();
      open.delete(victim);
      victim.destroy();
    }
    open.set(sock, { serving: false });
    sock.once('close', () => open.delete(sock));
  });
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    const st = open.get(req.socket);
    if (!st) return;
    st.serving = true;
    // A reader that takes nothing: node's socket timeout does not see a write that waits, so the
    // progress of what was handed to the socket is watched instead.
    const sock = req.socket;
    let written = sock.bytesWritten;
    const watchdog = setInterval(() => {
      if (sock.writableLength > 0 && sock.bytesWritten === written) sock.destroy();
      written = sock.bytesWritten;
    }, limits.stallTimeoutMs);
    watchdog.unref();
    const done = (): void => {
      clearInterval(watchdog);
      st.serving = false;
    };
    res.once('finish', done);
    res.once('close', done);
  });
}

/** The registry's text, gzipped when the client takes it (Prometheus always does). */
function serveMetrics(registry: Registry, req: IncomingMessage, res: ServerResponse): void {
  const zipped = acceptsGzip(req.headers['accept-encoding']);
  registry
    .metrics()
    .then(async (text) => {
      const body = zipped ? await gzip(text) : Buffer.from(text);
      res.writeHead(200, {
        'Content-Type': registry.contentType,
        'Content-Length': body.length,
        Vary: 'Accept-Encoding',
        ...(zipped ? { 'Content-Encoding': 'gzip' } : {}),
      });
      res.end(req.method === 'HEAD' ? undefined : body);
    })
    .catch((e: unknown) => res.writeHead(500).end(`${e instanceof Error ? e.message : String(e)}\n`));
}

export function createMetricsServer(o: MetricsServerOptions, limits: Partial<ServerLimits> = {}): Server {
  const handle = (req: IncomingMessage, res: ServerResponse, authorized: boolean): void => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405).end();
    } else if (path === '/metrics' && o.authorize && !authorized) {
      guarded(o.authorize, req, res, () => handle(req, res, true));
    } else if (path === '/metrics') {
      serveMetrics(o.registry, req, res);
    } else if (path === '/healthz') {
      res.writeHead(200).end('ok\n');
    } else if (o.routes && path && Object.hasOwn(o.routes, path) && req.method === 'GET') {
      o.routes[path]!(req, res);
    } else if (path === '/readyz') {
      const ok = o.ready();
      res.writeHead(ok ? 200 : 503).end(ok ? 'ready\n' : 'first sync not done\n');
    } else {
      res.writeHead(404).end('try /metrics, /healthz or /readyz\n');
    }
  };
  const lim = { ...DEFAULT_SERVER_LIMITS, ...limits };
  // The header and request timeouts are checked on this interval (node's default is 30 s).
  const server = createServer({ connectionsCheckingInterval: Math.min(1000, lim.headersTimeoutMs), maxHeaderSize: 16 << 10 }, (req, res) => handle(req, res, false));
  limitConnections(server, lim);
  return server;
}
