// The agent's HTTP server: /metrics, /healthz, /readyz (first sync done) and the given routes (/evidence, /findings).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { promisify } from 'node:util';
import { gzip as gzipCallback } from 'node:zlib';
import type { Registry } from 'prom-client';
import { errText } from '../errors.js';
import { DEFAULT_SERVER_LIMITS, limitConnections, type ServerLimits } from '../http-limits.js';

const gzip = promisify(gzipCallback);

export interface MetricsServerOptions {
  registry: Registry;
  /** True once every source has been read once. */
  ready: () => boolean;
  /** Access control for /metrics only (--metrics-auth kubernetes): the kubelet's probes stay open. */
  authorize?: (
    req: IncomingMessage,
  ) => Promise<{ ok: true } | { ok: false; status: number; message: string; retryAfterS?: number }>;
  /** More GET paths, each with its own access control (the agent's /evidence). */
  routes?: Record<string, (req: IncomingMessage, res: ServerResponse) => void>;
}

/** Answers with the authorizer's refusal, or passes the request on. */
function guarded(
  authorize: NonNullable<MetricsServerOptions['authorize']>,
  req: IncomingMessage,
  res: ServerResponse,
  next: () => void,
): void {
  authorize(req).then(
    (d) => {
      if (d.ok) return next();
      // RFC 6750: a 401 names the scheme to use.
      const scheme = d.status === 401 ? { 'WWW-Authenticate': 'Bearer realm="clbprobe"' } : undefined;
      const retry = d.retryAfterS ? { 'Retry-After': String(d.retryAfterS) } : undefined;
      res
        .writeHead(d.status, { 'Content-Type': 'text/plain; charset=utf-8', ...scheme, ...retry })
        .end(`${d.message}\n`);
    },
    (e: unknown) => res.writeHead(500).end(`${errText(e)}\n`),
  );
}

/** Whether Accept-Encoding takes gzip: listed or covered by "*", and not with q=0 (RFC 9110 12.5.3). */
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
    .catch((e: unknown) => res.writeHead(500).end(`${errText(e)}\n`));
}

export function createMetricsServer(options: MetricsServerOptions, limits: Partial<ServerLimits> = {}): Server {
  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405).end();
    } else if (path === '/metrics') {
      const serve = () => serveMetrics(options.registry, req, res);
      if (options.authorize) guarded(options.authorize, req, res, serve);
      else serve();
    } else if (path === '/healthz') {
      res.writeHead(200).end('ok\n');
    } else if (options.routes && path && Object.hasOwn(options.routes, path) && req.method === 'GET') {
      options.routes[path]!(req, res);
    } else if (path === '/readyz') {
      const ok = options.ready();
      res.writeHead(ok ? 200 : 503).end(ok ? 'ready\n' : 'first sync not done\n');
    } else {
      res.writeHead(404).end('try /metrics, /healthz or /readyz\n');
    }
  };
  const lim = { ...DEFAULT_SERVER_LIMITS, ...limits };
  // The header and request timeouts are checked on this interval (node's default is 30 s).
  const server = createServer(
    { connectionsCheckingInterval: Math.min(1000, lim.headersTimeoutMs), maxHeaderSize: 16 << 10 },
    handle,
  );
  limitConnections(server, lim);
  return server;
}
