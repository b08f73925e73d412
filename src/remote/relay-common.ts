// Shared by the relay's /evidence and /status: request limits, the fan-out over agent pods, and one agent's answer.
import { type IncomingMessage, request, type ServerResponse } from 'node:http';
import { admit, CallerSlots, ON_BEHALF_OF_HEADER, refuse } from '../agent/evidence-http.js';
import type { AuthDecision } from '../agent/kube-authorizer.js';
import type { UserInfo } from '../cluster/access-review.js';
import { byText } from '../compare.js';
import { errText } from '../errors.js';
import { type AgentPod, planNodes, type Unreachable } from './agent-pods.js';
import { readRefusal, refusalText } from './evidence-lines.js';

/** The header that carries the caller's "Bearer TOKEN" through the API server's proxy. */
export const TOKEN_HEADER = 'x-clbprobe-authorization';

export const ndjson = (o: object): string => `${JSON.stringify(o)}\n`;

/** `ask` for every pod, `concurrency` at a time, until `res` (the caller) goes away; the answers as they came. */
export async function eachPod<T>(
  pods: readonly AgentPod[],
  concurrency: number,
  ask: (pod: AgentPod) => Promise<T>,
  res?: ServerResponse,
): Promise<T[]> {
  // Each pod's request listens for the caller going away.
  res?.setMaxListeners(concurrency + 10);
  const queue = [...pods];
  const out: T[] = [];
  const worker = async (): Promise<void> => {
    for (let pod = queue.shift(); pod !== undefined && !res?.destroyed; pod = queue.shift()) out.push(await ask(pod));
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, queue.length) }, worker));
  return out;
}

/** The agents a relay route asks, and its bounds. */
export interface AgentsOptions {
  listPods: () => Promise<AgentPod[]>;
  container: string;
  /** The agents' HTTP port (their --listen). */
  agentPort: number;
  /** Agents asked at once for one request. */
  concurrency: number;
  /** Requests answered at once; more get 503. */
  maxRequests: number;
  /** Requests answered at once for one caller; more get 429. */
  maxRequestsPerCaller: number;
  /** The relay's own token for a node's agent (audience clbprobe-evidence:NODE). */
  nodeToken: (node: string) => Promise<string>;
}

export interface NodeOutcome {
  node: string;
  pod?: string;
  status: 'ok' | 'failed';
  error?: string;
}

/** What one route asks every agent, once the caller's request is read. */
export interface FanOut<T extends NodeOutcome> {
  /** Who the caller is, and whether they may ask. */
  decide: (token: string, source?: string) => Promise<AuthDecision>;
  /** Only these nodes (the others are not asked). */
  only?: string[];
  /** The outcome of a node that cannot be asked, and the line that reports it. */
  unreachable: (u: Unreachable) => T;
  lineOf: (failed: T) => object;
  ask: (pod: AgentPod, user: UserInfo, res: ServerResponse) => Promise<T>;
  summary: (results: T[], answered: number) => object;
}

/**
 * A relay route: authenticated before counting against the limits, then every agent asked, each node's lines as they
 * come, and a summary; `read` turns the request into the route's FanOut, or the reason for a 400.
 */
export function fanOutRoute<T extends NodeOutcome>(
  options: AgentsOptions,
  what: string,
  read: (req: IncomingMessage) => FanOut<T> | { error: string },
): (req: IncomingMessage, res: ServerResponse) => void {
  const { maxRequestsPerCaller } = options;
  const slots = new CallerSlots({ maxRequestsPerCaller, maxWatchesPerCaller: maxRequestsPerCaller });
  let active = 0;
  return (req, res) => {
    const token = req.headers[TOKEN_HEADER];
    // Nothing is held for a caller without a token: not the connection either.
    if (typeof token !== 'string' || !token) {
      res.setHeader('Connection', 'close');
      return refuse(res, 401, `no bearer token in ${TOKEN_HEADER}`);
    }
    const route = read(req);
    if ('error' in route) return refuse(res, 400, route.error);
    void (async () => {
      const d = await route.decide(token, req.socket.remoteAddress);
      if (!admit(res, d, slots, false)) return;
      if (active >= options.maxRequests)
        return refuse(res, 503, `${active} ${what} are being answered; try again shortly`);
      active++;
      res.once('close', () => active--);
      let pods: AgentPod[];
      try {
        pods = await options.listPods();
      } catch (e) {
        return refuse(res, 502, `the relay cannot list the agent pods: ${errText(e)}`);
      }
      const plan = planNodes(pods, options.container, route.only);
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson', 'Cache-Control': 'no-store' });
      res.flushHeaders();
      const results = plan.unreachable.map(route.unreachable);
      for (const r of results) res.write(ndjson(route.lineOf(r)));
      results.push(...(await eachPod(plan.ask, options.concurrency, (pod) => route.ask(pod, d.user, res), res)));
      results.sort((a, b) => byText(a.node, b.node));
      res.end(ndjson(route.summary(results, results.filter((r) => r.status === 'ok').length)));
    })().catch((e: unknown) => {
      if (!res.headersSent) refuse(res, 500, errText(e));
      else res.destroy();
    });
  };
}

/** Where an agent's lines go (the caller's answer, or the Event recorder's list). */
export interface AgentSink {
  /** One NDJSON line; false: wait for 'drain'. */
  write(text: string): boolean;
  once(event: 'drain' | 'close', cb: () => void): unknown;
  off(event: 'close', cb: () => void): unknown;
  /** True once the caller has gone away (a ServerResponse's). */
  readonly destroyed?: boolean;
}

/** The characters of unfinished lines the relay holds, shared by every agent answer it reads. */
export class LineBudget {
  private used = 0;
  constructor(readonly limit: number) {}
  /** Takes `n` more (or gives back, when negative); false, taking nothing, when that would pass the limit. */
  take(n: number): boolean {
    if (n > 0 && this.used + n > this.limit) return false;
    this.used += n;
    return true;
  }
}

/** How to read one agent's answer. */
export interface AgentRequest {
  path: string;
  /** The user the relay asks for (ON_BEHALF_OF_HEADER); none: it asks as itself. */
  user?: string;
  timeoutMs: number;
  maxLine: number;
  maxBytes?: number;
  budget?: LineBudget;
  /** Added to the message of a 404. */
  notFound?: string;
  /** One non-blank line; `send` passes a line on to the sink; a message when the node fails on it. */
  line: (text: string, send: (line: object) => void) => string | undefined;
}

/** Reads one agent's answer through `a.line`; resolves to why the node failed, or undefined when it ended. */
export async function readAgent(
  options: Pick<AgentsOptions, 'agentPort' | 'nodeToken'>,
  pod: AgentPod,
  sink: AgentSink,
  a: AgentRequest,
): Promise<string | undefined> {
  if (!pod.ip) return 'the agent pod has no IP yet';
  let nodeToken: string;
  try {
    nodeToken = await options.nodeToken(pod.node);
  } catch (e) {
    return `the relay cannot get a token for this node: ${errText(e)}`;
  }
  // The caller may have gone while the token was minted: its 'close' has fired already.
  if (sink.destroyed) return 'the caller went away';
  const headers = {
    authorization: `Bearer ${nodeToken}`,
    ...(a.user !== undefined ? { [ON_BEHALF_OF_HEADER]: a.user } : {}),
  };
  return new Promise((resolve) => {
    let settled = false;
    /** Characters of this answer's unfinished line charged to the budget. */
    let held = 0;
    // The caller going away stops asking.
    const onCallerClose = (): void => stop('the caller went away');
    const done = (error?: string): void => {
      if (settled) return;
      settled = true;
      sink.off('close', onCallerClose);
      a.budget?.take(-held);
      clearTimeout(timer);
      resolve(error);
    };
    // The reason first: destroying the request makes its answer emit "aborted".
    const stop = (error: string): void => {
      done(error);
      agentReq.destroy();
    };
    const agentReq = request({ host: pod.ip, port: options.agentPort, path: a.path, headers }, (agentRes) => {
      agentRes.setEncoding('utf8');
      agentRes.on('error', (e) => done(`the agent's answer broke: ${e.message}`));
      if (agentRes.statusCode !== 200) {
        const hint = agentRes.statusCode === 404 ? (a.notFound ?? '') : '';
        return readRefusal(agentRes, (body) =>
          done(`the agent answered ${agentRes.statusCode}: ${refusalText(body)}${hint}`),
        );
      }
      const send = (line: object): void => {
        if (sink.write(ndjson(line))) return;
        agentRes.pause();
        sink.once('drain', () => agentRes.resume());
      };
      const onLine = (text: string): void => {
        if (text.trim()) {
          const error = a.line(text, send);
          if (error) stop(error);
        }
      };
      let rest = '';
      let bytes = 0;
      agentRes.on('data', (d: string) => {
        if (settled) return;
        if (a.maxBytes !== undefined) {
          bytes += Buffer.byteLength(d);
          if (bytes > a.maxBytes) return stop(`the agent's answer passed ${a.maxBytes} bytes`);
        }
        rest += d;
        for (let nl = rest.indexOf('\n'); nl >= 0 && !settled; nl = rest.indexOf('\n')) {
          onLine(rest.slice(0, nl));
          rest = rest.slice(nl + 1);
        }
        if (settled) return;
        if (rest.length > a.maxLine) stop(`the agent sent a line longer than ${a.maxLine} bytes`);
        else if (a.budget && !a.budget.take(rest.length - held))
          stop(
            `the relay holds ${a.budget.limit} characters of unfinished lines at most, ` +
              `across all answers, and this agent's line would pass that; ask again`,
          );
        else held = rest.length;
      });
      agentRes.on('end', () => {
        if (!settled) onLine(rest);
        done();
      });
    });
    agentReq.on('error', (e) => done(`cannot reach the agent at ${pod.ip}:${options.agentPort}: ${e.message}`));
    const timer = setTimeout(() => stop(`no complete answer within ${a.timeoutMs / 1000} s (timeout)`), a.timeoutMs);
    sink.once('close', onCallerClose);
    agentReq.end();
  });
}
