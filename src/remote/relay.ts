// The evidence relay: a capability-free Deployment reached via the service proxy; it checks the user may "get" the
// Service and asks each agent with a node-audience token naming the user in ON_BEHALF_OF_HEADER, so the on-call token
// never leaves it and no address can be named. Authenticated before counting against maxRequests, capped per caller.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type CheckAccess, type EvidenceQuery, parseEvidenceQuery } from '../agent/evidence-http.js';
import type { UserInfo } from '../cluster/access-review.js';
import { type AgentPod, notReadyNote, type Unreachable } from './agent-pods.js';
import { EvidenceTally } from './evidence-lines.js';
import { type AgentsOptions, fanOutRoute, LineBudget, type NodeOutcome, ndjson, readAgent } from './relay-common.js';

export { TOKEN_HEADER } from './relay-common.js';

export interface RelayOptions extends AgentsOptions {
  check: CheckAccess;
  /** Characters of unfinished agent lines held at once across all requests (default RELAY_LINE_BUDGET). */
  lineBudget?: number;
}

/** One node's outcome, as the summary reports it. */
export interface RelayNodeResult extends NodeOutcome {
  entries: number;
}

/** Longest line an agent may send (an entry is ~500 bytes; a Service line lists its endpoints). */
const MAX_LINE = 1 << 20;
/** Unfinished agent lines held at once by the whole relay, far below MAX_LINE × --concurrency × --max-requests. */
const RELAY_LINE_BUDGET = 16 << 20;

export function relayRoute(options: RelayOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const budget = new LineBudget(options.lineBudget ?? RELAY_LINE_BUDGET);
  return fanOutRoute<RelayNodeResult>(options, 'evidence requests', (req) => {
    const search = new URL(req.url ?? '/', 'http://x').searchParams;
    const q = parseEvidenceQuery(search);
    if ('error' in q) return q;
    const only = search
      .getAll('node')
      .flatMap((n) => n.split(','))
      .filter(Boolean);
    if (only.some((n) => n.length > 253)) return { error: 'node names are at most 253 characters' };
    if (only.length > 5000) return { error: 'at most 5000 node names' };
    const attrs = { resource: { verb: 'get', group: '', resource: 'services', namespace: q.namespace, name: q.name } };
    return {
      decide: (token, source) => options.check(token, attrs, source),
      ...(only.length ? { only } : {}),
      unreachable: unreachableResult,
      lineOf: (r) => ({ node: r.node, ...(r.pod ? { pod: r.pod } : {}), type: 'error', message: r.error }),
      ask: (pod, user, res) => askAgent(options, q, pod, user, res, budget),
      summary: (nodes, answered) => ({ type: 'summary', answered, failed: nodes.length - answered, nodes }),
    };
  });
}

/** The result of a node whose agent cannot be asked. */
export function unreachableResult(u: Unreachable): RelayNodeResult {
  return { node: u.node, ...(u.pod ? { pod: u.pod } : {}), status: 'failed', entries: 0, error: u.reason };
}

/** The query of an evidence request, to an agent or to the relay. */
export function evidenceSearch(service: string, port?: number, watchS?: number): URLSearchParams {
  const search = new URLSearchParams({ service });
  if (port) search.set('port', String(port));
  if (watchS) search.set('watch', String(watchS));
  return search;
}

/** Streams one agent's answer into `res`, each line with node and pod; never throws. */
async function askAgent(
  options: AgentsOptions,
  query: EvidenceQuery,
  pod: AgentPod,
  user: UserInfo,
  res: ServerResponse,
  budget: LineBudget,
): Promise<RelayNodeResult> {
  const result: RelayNodeResult = { node: pod.node, pod: pod.name, status: 'failed', entries: 0 };
  const search = evidenceSearch(`${query.namespace}/${query.name}`, query.port, query.watchS);
  const tally = new EvidenceTally();
  const failed = await readAgent(options, pod, res, {
    path: `/evidence?${search}`,
    user: JSON.stringify(user),
    timeoutMs: (query.watchS + 30) * 1000,
    maxLine: MAX_LINE,
    budget,
    line: (text, send) => {
      const l = tally.read(text);
      if (l) send(Object.assign({ node: pod.node, pod: pod.name }, l, { node: pod.node, pod: pod.name }));
      return undefined;
    },
  });
  result.entries = tally.entries;
  if (failed) {
    result.error = failed + notReadyNote(pod);
    res.write(ndjson({ node: pod.node, pod: pod.name, type: 'error', message: result.error }));
  } else if (tally.ended && !tally.errors.length) result.status = 'ok';
  else result.error = tally.errors[0] ?? 'the agent ended without its end line';
  return result;
}
