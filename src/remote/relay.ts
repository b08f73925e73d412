// The evidence relay: a capability-free Deployment reached via the service proxy; it checks the user may "get" the
// Service and asks each agent with a node-audience token naming the user in ON_BEHALF_OF_HEADER, so the on-call token
// never leaves it and no address can be named. Authenticated before counting against maxRequests, capped per caller.
import { type IncomingMessage, request, type ServerResponse } from 'node:http';
import type { EvidenceLine } from '../agent/evidence.js';
import {
  type CheckAccess,
  type EvidenceQuery,
  ON_BEHALF_OF_HEADER,
  parseEvidenceQuery,
} from '../agent/evidence-http.js';
import type { UserInfo } from '../cluster/access-review.js';
import { byText } from '../compare.js';
import { errText } from '../errors.js';
import { type AgentPod, planNodes } from './agent-pods.js';
import { EvidenceLineError, parseEvidenceLine } from './evidence-lines.js';
import { eachPod, ndjson as json, MAX_REFUSAL, RequestLimits, refusalText } from './relay-common.js';

/** The header that carries the caller's "Bearer TOKEN" through the API server's proxy. */
export const TOKEN_HEADER = 'x-clbprobe-authorization';

export interface RelayOptions {
  check: CheckAccess;
  listPods: () => Promise<AgentPod[]>;
  container: string;
  /** The agents' HTTP port (their --listen). */
  agentPort: number;
  /** Nodes asked at once for one request. */
  concurrency: number;
  /** Requests answered at once; more get 503. */
  maxRequests: number;
  /** Requests answered at once for one caller; more get 429. */
  maxRequestsPerCaller: number;
  /** The relay's own token for a node's agent (audience clbprobe-evidence:NODE). */
  nodeToken: (node: string) => Promise<string>;
  /** Characters of unfinished agent lines held at once across all requests (default RELAY_LINE_BUDGET). */
  lineBudget?: number;
}

/** One node's outcome, as the summary reports it. */
export interface RelayNodeResult {
  node: string;
  pod?: string;
  status: 'ok' | 'failed';
  entries: number;
  error?: string;
}

/** Longest line an agent may send (an entry is ~500 bytes; a Service line lists its endpoints). */
const MAX_LINE = 1 << 20;
/** Unfinished agent lines held at once by the whole relay, far below MAX_LINE × --concurrency × --max-requests. */
const RELAY_LINE_BUDGET = 16 << 20;

/** The characters of unfinished lines the relay holds, shared by every agent answer it reads. */
class LineBudget {
  private used = 0;
  constructor(readonly limit: number) {}
  /** Takes `n` more (or gives back, when negative); false, taking nothing, when that would pass the limit. */
  take(n: number): boolean {
    if (n > 0 && this.used + n > this.limit) return false;
    this.used += n;
    return true;
  }
}
export function relayRoute(options: RelayOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const budget = new LineBudget(options.lineBudget ?? RELAY_LINE_BUDGET);
  const limits = new RequestLimits(options.maxRequests, options.maxRequestsPerCaller, 'evidence requests');
  return (req, res) => {
    const refuse = (status: number, message: string, extra: Record<string, string> = {}): void => {
      res.writeHead(status, { 'Content-Type': 'application/x-ndjson', ...extra }).end(json({ type: 'error', message }));
    };
    const token = req.headers[TOKEN_HEADER];
    const authorization = typeof token === 'string' ? token : undefined;
    // Nothing is held for a caller without a token: not the connection either.
    if (!authorization) return refuse(401, `no bearer token in ${TOKEN_HEADER}`, { Connection: 'close' });
    const search = new URL(req.url ?? '/', 'http://x').searchParams;
    const q = parseEvidenceQuery(search);
    if ('error' in q) return refuse(400, q.error);
    const only = search
      .getAll('node')
      .flatMap((n) => n.split(','))
      .filter(Boolean);
    if (only.some((n) => n.length > 253)) return refuse(400, 'node names are at most 253 characters');
    if (only.length > 5000) return refuse(400, 'at most 5000 node names');
    const attrs = { resource: { verb: 'get', group: '', resource: 'services', namespace: q.namespace, name: q.name } };
    void (async () => {
      const d = await options.check(authorization, attrs, req.socket.remoteAddress);
      if (!d.ok) return refuse(d.status, d.message, 'retryAfterS' in d ? { 'Retry-After': String(d.retryAfterS) } : {});
      if (res.destroyed) return;
      const refusal = limits.admit(d.user, res);
      if (refusal) return refuse(refusal.status, refusal.message, refusal.headers);
      let pods: AgentPod[];
      try {
        pods = await options.listPods();
      } catch (e) {
        return refuse(502, `the relay cannot list the agent pods: ${errText(e)}`);
      }
      const plan = planNodes(pods, options.container, only.length ? only : undefined);
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson', 'Cache-Control': 'no-store' });
      res.flushHeaders();
      const results: RelayNodeResult[] = plan.unreachable.map((u) => ({
        node: u.node,
        ...(u.pod ? { pod: u.pod } : {}),
        status: 'failed',
        entries: 0,
        error: u.reason,
      }));
      for (const r of results)
        res.write(json({ node: r.node, ...(r.pod ? { pod: r.pod } : {}), type: 'error', message: r.error }));
      results.push(
        ...(await eachPod(plan.ask, options.concurrency, res, (pod) => askAgent(options, q, pod, d.user, res, budget))),
      );
      results.sort((a, b) => byText(a.node, b.node));
      const ok = results.filter((r) => r.status === 'ok').length;
      res.end(json({ type: 'summary', answered: ok, failed: results.length - ok, nodes: results }));
    })().catch((e: unknown) => {
      if (!res.headersSent) refuse(500, errText(e));
      else res.destroy();
    });
  };
}

/** Streams one agent's answer into `res`, each line with node and pod; never throws. */
async function askAgent(
  options: RelayOptions,
  query: EvidenceQuery,
  pod: AgentPod,
  user: UserInfo,
  res: ServerResponse,
  budget: LineBudget,
): Promise<RelayNodeResult> {
  const result: RelayNodeResult = { node: pod.node, pod: pod.name, status: 'failed', entries: 0 };
  const fail = (message: string): RelayNodeResult => {
    result.error = message + (pod.ready ? '' : ' (the agent container is not ready)');
    res.write(json({ node: pod.node, pod: pod.name, type: 'error', message: result.error }));
    return result;
  };
  if (!pod.ip) return fail('the agent pod has no IP yet');
  let nodeToken: string;
  try {
    nodeToken = await options.nodeToken(pod.node);
  } catch (e) {
    return fail(`the relay cannot get a token for this node: ${errText(e)}`);
  }
  const headers = { authorization: `Bearer ${nodeToken}`, [ON_BEHALF_OF_HEADER]: JSON.stringify(user) };
  const search = new URLSearchParams({ service: `${query.namespace}/${query.name}` });
  if (query.port) search.set('port', String(query.port));
  if (query.watchS) search.set('watch', String(query.watchS));
  const timeoutMs = (query.watchS + 30) * 1000;
  return new Promise((resolve) => {
    let settled = false;
    /** Characters of this answer's unfinished line charged to the budget. */
    let held = 0;
    const done = (r: RelayNodeResult): void => {
      if (settled) return;
      settled = true;
      budget.take(-held);
      held = 0;
      clearTimeout(timer);
      resolve(r);
    };
    /** Fails this node once: a later event (the abort its own failure causes) does not replace the reason. */
    const finish = (message: string): void => {
      if (!settled) done(fail(message));
    };
    const agentReq = request(
      { host: pod.ip, port: options.agentPort, path: `/evidence?${search}`, headers },
      (agentRes) => {
        if (agentRes.statusCode !== 200) {
          let body = '';
          agentRes.setEncoding('utf8');
          agentRes.on('data', (d: string) => {
            if (body.length < MAX_REFUSAL) body += d;
          });
          agentRes.on('end', () => finish(`the agent answered ${agentRes.statusCode}: ${refusalText(body)}`));
          agentRes.on('error', (e) => finish(`the agent's answer broke: ${e.message}`));
          return;
        }
        let rest = '';
        let sawEnd = false;
        const errors: string[] = [];
        const onLine = (text: string): void => {
          if (!text.trim()) return;
          let l: EvidenceLine;
          try {
            l = parseEvidenceLine(text);
          } catch (e) {
            errors.push(e instanceof EvidenceLineError ? e.message : `unexpected output: ${text.slice(0, 200)}`);
            return;
          }
          if (l.type === 'entry') result.entries++;
          if (l.type === 'end') sawEnd = true;
          if (l.type === 'error') errors.push(l.message);
          if (
            !res.write(json(Object.assign({ node: pod.node, pod: pod.name }, l, { node: pod.node, pod: pod.name })))
          ) {
            agentRes.pause();
            res.once('drain', () => agentRes.resume());
          }
        };
        agentRes.setEncoding('utf8');
        agentRes.on('data', (d: string) => {
          if (settled) return;
          rest += d;
          let nl: number;
          while ((nl = rest.indexOf('\n')) >= 0) {
            onLine(rest.slice(0, nl));
            rest = rest.slice(nl + 1);
          }
          // The reason first: destroying the request makes its answer emit "aborted".
          if (rest.length > MAX_LINE) {
            finish(`the agent sent a line longer than ${MAX_LINE} bytes`);
            agentReq.destroy();
          } else if (!budget.take(rest.length - held)) {
            finish(
              `the relay holds ${budget.limit} characters of unfinished lines at most, ` +
                `across all answers, and this agent's line would pass that; ask again`,
            );
            agentReq.destroy();
          } else held = rest.length;
        });
        agentRes.on('end', () => {
          onLine(rest);
          if (sawEnd && !errors.length) {
            result.status = 'ok';
            done(result);
          } else {
            result.error = errors[0] ?? 'the agent ended without its end line';
            done(result);
          }
        });
        agentRes.on('error', (e) => finish(`the agent's answer broke: ${e.message}`));
      },
    );
    agentReq.on('error', (e) => finish(`cannot reach the agent at ${pod.ip}:${options.agentPort}: ${e.message}`));
    const timer = setTimeout(() => {
      agentReq.destroy();
      finish(`no complete answer within ${timeoutMs / 1000} s (timeout)`);
    }, timeoutMs);
    // The caller going away stops asking.
    res.once('close', () => {
      agentReq.destroy();
      done(result);
    });
    agentReq.end();
  });
}
