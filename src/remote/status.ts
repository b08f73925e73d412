// GET /status on the relay: every agent's findings, asked as in relay.ts; a silent node is a "failed" line, never left
// out. Bounded in nodes, time, bytes and requests; NDJSON findings, one node line per node, and a summary.
import { type IncomingMessage, request, type ServerResponse } from 'node:http';
import { ON_BEHALF_OF_HEADER } from '../agent/evidence-http.js';
import type { AuthnResult } from '../agent/kube-authorizer.js';
import { byText } from '../compare.js';
import { errText } from '../errors.js';
import { type AgentPod, planNodes } from './agent-pods.js';
import { TOKEN_HEADER } from './relay.js';
import { eachPod, ndjson as json, MAX_REFUSAL, RequestLimits, refusalText } from './relay-common.js';

export interface StatusRelayOptions {
  /** TokenReview of the caller's token (the API server's own audience). */
  authenticate: (authorization: string | undefined, source?: string) => Promise<AuthnResult>;
  listPods: () => Promise<AgentPod[]>;
  container: string;
  agentPort: number;
  /** Agents asked at once for one request. */
  concurrency: number;
  maxRequests: number;
  maxRequestsPerCaller: number;
  nodeToken: (node: string) => Promise<string>;
  /** Time for one agent's whole answer. */
  agentTimeoutMs: number;
  maxAnswerBytes: number;
}

/** A finding line with evidence is a few KB; a line past this is not an agent's. */
const MAX_LINE = 256 * 1024;

export interface StatusNodeLine {
  type: 'node';
  node: string;
  pod?: string;
  status: 'ok' | 'failed';
  version?: string;
  findings: number;
  /** Findings left out by the agent's cap. */
  more?: number;
  /** Services whose access the agent could not check, and the first reason. */
  unchecked?: number;
  uncheckedReason?: string;
  error?: string;
}

export function statusRoute(options: StatusRelayOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const limits = new RequestLimits(options.maxRequests, options.maxRequestsPerCaller);
  return (req, res) => {
    const refuse = (status: number, message: string, extra: Record<string, string> = {}): void => {
      res.writeHead(status, { 'Content-Type': 'application/x-ndjson', ...extra }).end(json({ type: 'error', message }));
    };
    const token = req.headers[TOKEN_HEADER];
    if (typeof token !== 'string') return refuse(401, `no bearer token in ${TOKEN_HEADER}`, { Connection: 'close' });
    void (async () => {
      const who = await options.authenticate(token, req.socket.remoteAddress);
      if (!who.ok)
        return refuse(who.status, who.message, 'retryAfterS' in who ? { 'Retry-After': String(who.retryAfterS) } : {});
      if (res.destroyed) return;
      const refusal = limits.admit(who.user, res);
      if (refusal) return refuse(refusal.status, refusal.message, refusal.headers);
      let pods: AgentPod[];
      try {
        pods = await options.listPods();
      } catch (e) {
        return refuse(502, `the relay cannot list the agent pods: ${errText(e)}`);
      }
      const plan = planNodes(pods, options.container);
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson', 'Cache-Control': 'no-store' });
      res.flushHeaders();
      const nodes: StatusNodeLine[] = plan.unreachable.map((u) => ({
        type: 'node',
        node: u.node,
        ...(u.pod ? { pod: u.pod } : {}),
        status: 'failed',
        findings: 0,
        error: u.reason,
      }));
      for (const n of nodes) res.write(json(n));
      const user = JSON.stringify(who.user);
      const asked = await eachPod(plan.ask, options.concurrency, res, async (pod) => {
        const n = await askFindings(options, pod, user, res);
        res.write(json(n));
        return n;
      });
      nodes.push(...asked);
      nodes.sort((a, b) => byText(a.node, b.node));
      const ok = nodes.filter((n) => n.status === 'ok').length;
      res.end(json({ type: 'summary', answered: ok, failed: nodes.length - ok }));
    })().catch((e: unknown) => {
      if (!res.headersSent) refuse(500, errText(e));
      else res.destroy();
    });
  };
}

/** Where an agent's finding lines go (the caller's answer, or the Event recorder's list). */
export interface FindingSink {
  /** One NDJSON line; false: wait for 'drain'. */
  write(text: string): boolean;
  once(event: 'drain' | 'close', cb: () => void): unknown;
}

export type AgentAsk = Pick<StatusRelayOptions, 'agentPort' | 'nodeToken' | 'agentTimeoutMs' | 'maxAnswerBytes'>;

/** Streams one agent's findings into `res` and returns its node line, never throwing; without `user` asks as itself. */
export async function askFindings(
  options: AgentAsk,
  pod: AgentPod,
  user: string | undefined,
  res: FindingSink,
): Promise<StatusNodeLine> {
  const result: StatusNodeLine = { type: 'node', node: pod.node, pod: pod.name, status: 'failed', findings: 0 };
  const failed = (message: string): StatusNodeLine => ({
    ...result,
    status: 'failed',
    error: message + (pod.ready ? '' : ' (the agent container is not ready)'),
  });
  if (!pod.ip) return failed('the agent pod has no IP yet');
  let nodeToken: string;
  try {
    nodeToken = await options.nodeToken(pod.node);
  } catch (e) {
    return failed(`the relay cannot get a token for this node: ${errText(e)}`);
  }
  return new Promise((resolve) => {
    let settled = false;
    const done = (r: StatusNodeLine): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(r);
    };
    const headers = {
      authorization: `Bearer ${nodeToken}`,
      ...(user !== undefined ? { [ON_BEHALF_OF_HEADER]: user } : {}),
    };
    const agentReq = request({ host: pod.ip, port: options.agentPort, path: '/findings', headers }, (agentRes) => {
      agentRes.setEncoding('utf8');
      if (agentRes.statusCode !== 200) {
        let body = '';
        agentRes.on('data', (d: string) => {
          if (body.length < MAX_REFUSAL) body += d;
        });
        agentRes.on('end', () => {
          const old = agentRes.statusCode === 404 ? ' (an agent older than /findings: upgrade the DaemonSet)' : '';
          done(failed(`the agent answered ${agentRes.statusCode}: ${refusalText(body)}${old}`));
        });
        agentRes.on('error', (e) => done(failed(`the agent's answer broke: ${e.message}`)));
        return;
      }
      let rest = '';
      let bytes = 0;
      let end: Record<string, unknown> | undefined;
      let sent = 0;
      const onLine = (text: string): void => {
        if (!text.trim()) return;
        let l: unknown;
        try {
          l = JSON.parse(text);
        } catch {
          return done(failed(`the agent sent a line that is not JSON: ${text.slice(0, 120)}`));
        }
        if (typeof l !== 'object' || l === null || Array.isArray(l))
          return done(failed('the agent sent a line that is not an object'));
        const r = l as Record<string, unknown>;
        if (r.type === 'finding') {
          sent++;
          if (!res.write(json({ ...r, type: 'finding', node: pod.node, pod: pod.name }))) {
            agentRes.pause();
            res.once('drain', () => agentRes.resume());
          }
        } else if (r.type === 'end') end = r;
      };
      agentRes.on('data', (d: string) => {
        if (settled) return;
        bytes += Buffer.byteLength(d);
        if (bytes > options.maxAnswerBytes) {
          done(failed(`the agent's answer passed ${options.maxAnswerBytes} bytes`));
          agentReq.destroy();
          return;
        }
        rest += d;
        let nl: number;
        while ((nl = rest.indexOf('\n')) >= 0 && !settled) {
          onLine(rest.slice(0, nl));
          rest = rest.slice(nl + 1);
        }
        if (rest.length > MAX_LINE) {
          done(failed(`the agent sent a line longer than ${MAX_LINE} bytes`));
          agentReq.destroy();
        }
      });
      agentRes.on('end', () => {
        onLine(rest);
        if (!end) return done(failed('the agent ended without its end line'));
        const num = (v: unknown): number | undefined =>
          typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined;
        const more = num(end.more);
        const unchecked = num(end.unchecked);
        done({
          ...result,
          status: 'ok',
          findings: sent,
          ...(typeof end.version === 'string' ? { version: end.version.slice(0, 100) } : {}),
          ...(more ? { more } : {}),
          ...(unchecked ? { unchecked, uncheckedReason: String(end.uncheckedReason ?? '').slice(0, 300) } : {}),
        });
      });
      agentRes.on('error', (e) => done(failed(`the agent's answer broke: ${e.message}`)));
    });
    agentReq.on('error', (e) => done(failed(`cannot reach the agent at ${pod.ip}:${options.agentPort}: ${e.message}`)));
    const timer = setTimeout(() => {
      agentReq.destroy();
      done(failed(`no complete answer within ${options.agentTimeoutMs / 1000} s (timeout)`));
    }, options.agentTimeoutMs);
    res.once('close', () => {
      agentReq.destroy();
      done(failed('the caller went away'));
    });
    agentReq.end();
  });
}
