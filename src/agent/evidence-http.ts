// GET /evidence: the evidence socket's NDJSON for callers allowed "get" on the Service (SAR), tokens reviewed for
// this node's audience only; only the relay's user may name another user, and per-caller caps bound each tenant.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AccessAttributes, UserInfo } from '../cluster/access-review.js';
import { errText } from '../errors.js';
import { Caller, type EvidenceAnswers, MAX_WATCH_S } from './evidence-server.js';
import type { AuthDecision, AuthnResult, KubeAuthorizer } from './kube-authorizer.js';

export type CheckAccess = KubeAuthorizer['check'];

/** The header in which the evidence relay names the user it asks for (JSON: username, uid, groups, extra). */
export const ON_BEHALF_OF_HEADER = 'x-clbprobe-on-behalf-of';

/** The TokenReview audience of a node's /evidence: a token for it is good on that node's agent only. */
export function evidenceAudience(nodeName: string): string {
  return `clbprobe-evidence:${nodeName}`;
}

/** The relay's service account unless --evidence-relay-user says otherwise. */
export const DEFAULT_RELAY_USER = 'system:serviceaccount:clbprobe:clbprobe-evidence-relay';

/** A KubeAuthorizer with this node's evidence audience, and the evidence relay's user (who alone may name another). */
export type EvidenceAccess = Pick<KubeAuthorizer, 'authenticate' | 'authorize'> & { relayUser: string };

/** 16 watches and 4 answers at once on the socket: one caller takes at most a few of them. */
export const DEFAULT_CALLER_LIMITS = { maxRequestsPerCaller: 4, maxWatchesPerCaller: 2 };

/** Bytes of the on-behalf-of header (a user with many groups is a few KB). */
const MAX_ON_BEHALF_BYTES = 8192;
const MAX_NAME = 512;
const MAX_GROUPS = 256;

const shortString = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= MAX_NAME;

/** The user the relay names, or why the header is not one. */
export function parseOnBehalfOf(header: string | string[] | undefined): UserInfo | { error: string } {
  const bad = (what: string) => ({ error: `${ON_BEHALF_OF_HEADER}${what}` });
  if (typeof header !== 'string') return { error: `the relay's request names no user (${ON_BEHALF_OF_HEADER})` };
  if (header.length > MAX_ON_BEHALF_BYTES) return bad(` longer than ${MAX_ON_BEHALF_BYTES} bytes`);
  let v: unknown;
  try {
    v = JSON.parse(header);
  } catch {
    return bad(' is not JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return bad(' is not an object');
  const o = v as Record<string, unknown>;
  if (!shortString(o.username)) return bad(' has no username');
  const groups = o.groups ?? [];
  if (!Array.isArray(groups) || groups.length > MAX_GROUPS || !groups.every(shortString))
    return bad(': groups must be a list of names');
  const user: UserInfo = { username: o.username, groups };
  if (o.uid !== undefined) {
    if (!shortString(o.uid)) return bad(': bad uid');
    user.uid = o.uid;
  }
  if (o.extra !== undefined) {
    if (typeof o.extra !== 'object' || o.extra === null || Array.isArray(o.extra)) return bad(': bad extra');
    const extra: Record<string, string[]> = {};
    for (const [k, list] of Object.entries(o.extra)) {
      if (!shortString(k) || !Array.isArray(list) || !list.every((x) => typeof x === 'string' && x.length <= MAX_NAME))
        return bad(': bad extra');
      extra[k] = list;
    }
    user.extra = extra;
  }
  return user;
}

/** Whose slots a request takes: a service account's namespace (a tenant can make many), else the user. */
export function callerKey(user: UserInfo): string {
  const sa = /^system:serviceaccount:([^:]+):/.exec(user.username);
  return sa ? `namespace ${sa[1]}` : `user ${user.username}`;
}

/** Counts of what each caller holds; entries go when they reach zero. */
export class CallerSlots {
  private readonly held = new Map<string, { requests: number; watches: number }>();
  constructor(private readonly limits: typeof DEFAULT_CALLER_LIMITS) {}

  /** Takes a slot (and a watch slot) for `key`; the release function, or why not. */
  take(key: string, watching: boolean): { release: () => void } | { error: string } {
    const h = this.held.get(key) ?? { requests: 0, watches: 0 };
    if (h.requests >= this.limits.maxRequestsPerCaller)
      return {
        error:
          `${key} has ${h.requests} evidence requests in progress (at most ` +
          `${this.limits.maxRequestsPerCaller}); try again when one ends`,
      };
    if (watching && h.watches >= this.limits.maxWatchesPerCaller)
      return {
        error:
          `${key} has ${h.watches} evidence watches open (at most ` +
          `${this.limits.maxWatchesPerCaller}); end one first`,
      };
    h.requests++;
    if (watching) h.watches++;
    this.held.set(key, h);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        h.requests--;
        if (watching) h.watches--;
        if (h.requests === 0) this.held.delete(key);
      },
    };
  }
}

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
  if (!m || service.length > 317)
    return { error: `service must be NAMESPACE/NAME, not ${JSON.stringify(service.slice(0, 100))}` };
  const q: EvidenceQuery = { namespace: m[1]!, name: m[3]!, watchS: 0 };
  const port = search.get('port');
  if (port !== null) {
    if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)
      return { error: `port must be 1-65535, not ${JSON.stringify(port.slice(0, 20))}` };
    q.port = Number(port);
  }
  const watch = search.get('watch');
  if (watch !== null) {
    if (!/^\d{1,5}$/.test(watch) || Number(watch) > MAX_WATCH_S)
      return { error: `watch must be 0-${MAX_WATCH_S} seconds` };
    q.watchS = Number(watch);
  }
  return q;
}

/** Ends the response with an NDJSON error line (and Retry-After when given). */
export function refuse(res: ServerResponse, status: number, message: string, retryAfterS?: number): void {
  const retry = retryAfterS ? { 'Retry-After': String(retryAfterS) } : undefined;
  res
    .writeHead(status, { 'Content-Type': 'application/x-ndjson', ...retry })
    .end(`${JSON.stringify({ type: 'error', message })}\n`);
}

/** Refuses a failed check, or a caller with no slot left; else holds a slot while the response is open. */
export function admit<D extends AuthDecision | AuthnResult>(
  res: ServerResponse,
  d: D,
  slots: CallerSlots,
  watching: boolean,
): d is Extract<D, { ok: true }> {
  if (!d.ok) refuse(res, d.status, d.message, 'retryAfterS' in d ? d.retryAfterS : undefined);
  if (!d.ok || res.destroyed) return false;
  const slot = slots.take(callerKey(d.user), watching);
  if ('error' in slot) refuse(res, 429, slot.error, 5);
  else res.on('close', slot.release);
  return !('error' in slot);
}

/** The token's user, or for the relay's user only the one named in ON_BEHALF_OF_HEADER (none: itself, if allowed). */
export async function requestUser(
  access: EvidenceAccess,
  req: IncomingMessage,
  relayAsItself = false,
): Promise<AuthnResult> {
  const who = await access.authenticate(req.headers.authorization, req.socket.remoteAddress ?? '');
  if (!who.ok) return who;
  const named = req.headers[ON_BEHALF_OF_HEADER];
  if (who.user.username !== access.relayUser) {
    if (named !== undefined)
      return {
        ok: false,
        status: 403,
        message: `${who.user.username} may not name another user (${ON_BEHALF_OF_HEADER}); only the evidence relay may`,
      };
    return who;
  }
  if (relayAsItself && named === undefined) return who;
  const user = parseOnBehalfOf(named);
  if ('error' in user) return { ok: false, status: 400, message: user.error };
  return { ok: true, user, tokenKey: who.tokenKey };
}

/** The route's handler; `answers` is the agent's evidence service, undefined until the agent has started. */
export function evidenceRoute(
  access: EvidenceAccess,
  answers: () => EvidenceAnswers | undefined,
  limits = DEFAULT_CALLER_LIMITS,
): (req: IncomingMessage, res: ServerResponse) => void {
  const slots = new CallerSlots(limits);
  return (req, res) => {
    const q = parseEvidenceQuery(new URL(req.url ?? '/', 'http://x').searchParams);
    if ('error' in q) return refuse(res, 400, q.error);
    const attrs: AccessAttributes = {
      resource: { verb: 'get', group: '', resource: 'services', namespace: q.namespace, name: q.name },
    };
    const source = req.socket.remoteAddress ?? '';
    const decide = async (): Promise<AuthDecision> => {
      const who = await requestUser(access, req);
      if (!who.ok) return who;
      return access.authorize(who.user, attrs, { tokenKey: who.tokenKey, source });
    };
    decide().then(
      (d) => {
        if (!admit(res, d, slots, q.watchS > 0)) return;
        const evidence = answers();
        if (!evidence) return refuse(res, 503, 'the agent is starting: its evidence is not served yet');
        res.writeHead(200, { 'Content-Type': 'application/x-ndjson', 'Cache-Control': 'no-store' });
        res.flushHeaders();
        // A watch may be quiet for its whole length; the server's watchdog still drops a reader that takes nothing.
        req.socket.setTimeout(0);
        evidence.serve(new Caller(res, evidence.limits), {
          service: `${q.namespace}/${q.name}`,
          ...(q.port ? { port: q.port } : {}),
          ...(q.watchS ? { watchS: q.watchS } : {}),
        });
      },
      (e: unknown) => refuse(res, 500, errText(e)),
    );
  };
}
