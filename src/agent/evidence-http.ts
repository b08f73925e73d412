// GET /evidence on the agent's HTTP port: the same NDJSON lines as the evidence socket, for
// whoever may read the Service. The caller's bearer token is checked with the API server
// (TokenReview), and its user must be allowed "get" on that Service (SubjectAccessReview), so
// the cluster's ordinary read access to a Service is the access to its connection evidence.
// The evidence relay (src/remote/relay.ts) calls this on every node with the on-call engineer's
// own token; nobody needs exec into the agent pod. The answer is the evidence socket's stream,
// piped: that server's bounds (concurrent answers, entries per answer, backpressure) hold here too.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { AuthDecision } from './kube-authorizer.js';
import type { AccessAttributes } from '../cluster/access-review.js';

export type CheckAccess = (authorization: string | undefined, attrs: AccessAttributes) => Promise<AuthDecision>;

/** Longest watch a caller may ask for (the evidence socket has the same cap). */
const MAX_WATCH_S = 3600;

export interface EvidenceQuery {
  namespace: string;
  name: string;
  port?: number;
  watchS: number;
}

/** ?service=NS/NAME[&port=N][&watch=SECONDS], or why not. */
export function parseEvidenceQuery(search: URLSearchParams): EvidenceQuery | { error: string } {
  const service = search.get('service') ?? '';
  const m = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/([a-z0-9]([-a-z0-9]*[a-z0-9])?)$/.exec(service);
  if (!m || service.length > 317) return { error: `service must be NAMESPACE/NAME, not ${JSON.stringify(service.slice(0, 100))}` };
  const q: EvidenceQuery = { namespace: m[1]!, name: m[3]!, watchS: 0 };
  const port = search.get('port');
  if (port !== null) {
    if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) return { error: `port must be 1-65535, not ${JSON.stringify(port.slice(0, 20))}` };
    q.port = Number(port);
  }
  const watch = search.get('watch');
  if (watch !== null) {
    if (!/^\d{1,5}$/.test(watch) || Number(watch) > MAX_WATCH_S) return { error: `watch must be 0-${MAX_WATCH_S} seconds` };
    q.watchS = Number(watch);
  }
  return q;
}

const line = (o: object): string => `${JSON.stringify(o)}\n`;

/** The route's handler; `socketPath` is the agent's evidence socket. */
export function evidenceRoute(check: CheckAccess, socketPath: string): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const refuse = (status: number, message: string): void => {
      res.writeHead(status, { 'Content-Type': 'application/x-ndjson' }).end(line({ type: 'error', message }));
    };
    const q = parseEvidenceQuery(new URL(req.url ?? '/', 'http://x').searchParams);
    if ('error' in q) return refuse(400, q.error);
    const attrs: AccessAttributes = { resource: { verb: 'get', group: '', resource: 'services', namespace: q.namespace, name: q.name } };
    check(req.headers.authorization, attrs).then(
      (d) => {
        if (!d.ok) return refuse(d.status, d.message);
        if (res.destroyed) return;
        const sock = connect(socketPath);
        const request = { service: `${q.namespace}/${q.name}`, ...(q.port ? { port: q.port } : {}), ...(q.watchS ? { watchS: q.watchS } : {}) };
        sock.on('connect', () => {
          sock.write(line(request));
          res.writeHead(200, { 'Content-Type': 'application/x-ndjson', 'Cache-Control': 'no-store' });
          res.flushHeaders();
          sock.pipe(res);
        });
        sock.on('error', (e) => {
          if (!res.headersSent) refuse(503, `the agent's evidence socket: ${e.message}`);
          else res.end(line({ type: 'error', message: `the agent's evidence socket: ${e.message}` }));
        });
        // The caller going away ends the answer (and a watch) on the socket too.
        res.on('close', () => sock.destroy());
      },
      (e: unknown) => refuse(500, e instanceof Error ? e.message : String(e)),
    );
  };
}
