// GET /status on the relay: every agent's findings, asked as in relay.ts; a silent node is a "failed" line, never left
// out. Bounded in nodes, time, bytes and requests; NDJSON findings, one node line per node, and a summary.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AuthnResult } from '../agent/kube-authorizer.js';
import { type AgentPod, notReadyNote } from './agent-pods.js';
import { jsonObject } from './evidence-lines.js';
import {
  type AgentSink,
  type AgentsOptions,
  fanOutRoute,
  type NodeOutcome,
  ndjson,
  readAgent,
} from './relay-common.js';

export interface StatusRelayOptions extends AgentsOptions {
  /** TokenReview of the caller's token (the API server's own audience). */
  authenticate: (authorization: string | undefined, source?: string) => Promise<AuthnResult>;
  /** Time for one agent's whole answer. */
  agentTimeoutMs: number;
  maxAnswerBytes: number;
}

/** A finding line with evidence is a few KB; a line past this is not an agent's. */
const MAX_LINE = 256 * 1024;

export interface StatusNodeLine extends NodeOutcome {
  type: 'node';
  version?: string;
  findings: number;
  /** Findings left out by the agent's cap. */
  more?: number;
  /** Services whose access the agent could not check, and the first reason. */
  unchecked?: number;
  uncheckedReason?: string;
}

export function statusRoute(options: StatusRelayOptions): (req: IncomingMessage, res: ServerResponse) => void {
  return fanOutRoute<StatusNodeLine>(options, 'requests', () => ({
    decide: options.authenticate,
    unreachable: (u) => ({
      type: 'node',
      node: u.node,
      ...(u.pod ? { pod: u.pod } : {}),
      status: 'failed',
      findings: 0,
      error: u.reason,
    }),
    lineOf: (n) => n,
    ask: async (pod, user, res) => {
      const n = await askFindings(options, pod, JSON.stringify(user), res);
      res.write(ndjson(n));
      return n;
    },
    summary: (nodes, answered) => ({ type: 'summary', answered, failed: nodes.length - answered }),
  }));
}

export type AgentAsk = Pick<StatusRelayOptions, 'agentPort' | 'nodeToken' | 'agentTimeoutMs' | 'maxAnswerBytes'>;

/** Streams one agent's findings into `sink`; its node line, never throwing. Without `user` it asks as itself. */
export async function askFindings(
  options: AgentAsk,
  pod: AgentPod,
  user: string | undefined,
  sink: AgentSink,
): Promise<StatusNodeLine> {
  const result: StatusNodeLine = { type: 'node', node: pod.node, pod: pod.name, status: 'failed', findings: 0 };
  let end: Record<string, unknown> | undefined;
  let sent = 0;
  const failed = await readAgent(options, pod, sink, {
    path: '/findings',
    ...(user !== undefined ? { user } : {}),
    timeoutMs: options.agentTimeoutMs,
    maxLine: MAX_LINE,
    maxBytes: options.maxAnswerBytes,
    notFound: ' (an agent older than /findings: upgrade the DaemonSet)',
    line: (text, send) => {
      const r = jsonObject(text);
      if (typeof r === 'string') return `the agent sent a line that is ${r}: ${text.slice(0, 120)}`;
      if (r.type === 'finding') {
        sent++;
        send({ ...r, type: 'finding', node: pod.node, pod: pod.name });
      } else if (r.type === 'end') end = r;
      return undefined;
    },
  });
  if (failed || !end) {
    const error = failed ?? 'the agent ended without its end line';
    return { ...result, error: error + notReadyNote(pod) };
  }
  const count = (v: unknown): number | undefined =>
    Number.isInteger(v) && (v as number) >= 0 ? (v as number) : undefined;
  const more = count(end.more);
  const unchecked = count(end.unchecked);
  return {
    ...result,
    status: 'ok',
    findings: sent,
    ...(typeof end.version === 'string' ? { version: end.version.slice(0, 100) } : {}),
    ...(more ? { more } : {}),
    ...(unchecked ? { unchecked, uncheckedReason: String(end.uncheckedReason ?? '').slice(0, 300) } : {}),
  };
}
