// TokenReview and SubjectAccessReview as kube-rbac-proxy uses them; the service account needs "create" on both.
import { errText } from '../errors.js';
import { postJson } from './api-post.js';
import { isObj } from './fields.js';
import type { ApiTarget } from './kube-config.js';

/** A user as TokenReview reports it and SubjectAccessReview takes it. */
export interface UserInfo {
  username: string;
  uid?: string;
  groups: string[];
  extra?: Record<string, string[]>;
}

/** What is asked: a non-resource URL ("get" /metrics) or a resource ("get" services web in shop). */
export type AccessAttributes =
  | { nonResource: { path: string; verb: string } }
  | { resource: { verb: string; group: string; resource: string; namespace?: string; name?: string } };

export type TokenReviewResult = { authenticated: true; user: UserInfo } | { authenticated: false; error: string };

/** A review the API server could not answer (unreachable, refused our own credentials, garbled). */
export class ReviewError extends Error {
  override readonly name = 'ReviewError';
}

/** A review answer is a few hundred bytes; anything far larger is not one. */
const MAX_ANSWER = 64 << 10;

/** Sends reviews to the API server; one object per agent. */
export class AccessReviewClient {
  constructor(
    private readonly target: ApiTarget,
    private readonly timeoutMs = 10_000,
  ) {}

  async reviewToken(token: string, audiences?: string[]): Promise<TokenReviewResult> {
    const body = {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenReview',
      spec: { token, ...(audiences?.length ? { audiences } : {}) },
    };
    return parseTokenReview(await this.post('/apis/authentication.k8s.io/v1/tokenreviews', body), audiences);
  }

  async reviewAccess(user: UserInfo, attrs: AccessAttributes) {
    const spec: Record<string, unknown> = { user: user.username, groups: user.groups };
    if (user.uid) spec.uid = user.uid;
    if (user.extra && Object.keys(user.extra).length) spec.extra = user.extra;
    if ('nonResource' in attrs) spec.nonResourceAttributes = attrs.nonResource;
    else spec.resourceAttributes = attrs.resource;
    const body = { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', spec };
    return parseAccessReview(await this.post('/apis/authorization.k8s.io/v1/subjectaccessreviews', body));
  }

  private async post(path: string, body: unknown): Promise<unknown> {
    const what = `POST ${path}`;
    const bounds = { timeoutMs: this.timeoutMs, maxBytes: MAX_ANSWER, overflow: 'fail' } as const;
    const { status, text } = await postJson(this.target, path, body, bounds).catch((e: unknown) => {
      throw new ReviewError(`${what}: ${errText(e)}`);
    });
    if (status !== 200 && status !== 201) throw new ReviewError(`${what}: ${statusText(status, text)}`);
    try {
      return JSON.parse(text);
    } catch {
      throw new ReviewError(`${what}: the answer is not JSON (${text.slice(0, 80)})`);
    }
  }
}

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

/**
 * A TokenReview answer's status; a malformed one is an error, never "authenticated". With `audiences` asked, the
 * token must be good for one of them: an authenticator that ignores them answers with none, for the API server's own.
 */
export function parseTokenReview(answer: unknown, audiences?: readonly string[]): TokenReviewResult {
  const status = isObj(answer) && isObj(answer.status) ? answer.status : undefined;
  if (!status) throw new ReviewError('TokenReview answer without a status');
  if (status.authenticated !== true) {
    return {
      authenticated: false,
      error: typeof status.error === 'string' && status.error ? status.error : 'token not authenticated',
    };
  }
  if (audiences?.length) {
    const granted = strings(status.audiences);
    if (!granted.some((a) => audiences.includes(a)))
      return {
        authenticated: false,
        error: `token not valid for ${audiences.join(', ')} (reviewed for ${granted.join(', ') || "the API server's audiences"})`,
      };
  }
  const u = isObj(status.user) ? status.user : {};
  if (typeof u.username !== 'string' || !u.username)
    throw new ReviewError('TokenReview answer: authenticated without a username');
  const user: UserInfo = { username: u.username, groups: strings(u.groups) };
  if (typeof u.uid === 'string' && u.uid) user.uid = u.uid;
  if (isObj(u.extra)) {
    const extra: Record<string, string[]> = {};
    for (const [k, v] of Object.entries(u.extra)) extra[k] = strings(v);
    if (Object.keys(extra).length) user.extra = extra;
  }
  return { authenticated: true, user };
}

/** A SubjectAccessReview answer's status; anything but `allowed: true` denies. */
export function parseAccessReview(answer: unknown): { allowed: boolean; reason: string } {
  const status = isObj(answer) && isObj(answer.status) ? answer.status : undefined;
  if (!status) throw new ReviewError('SubjectAccessReview answer without a status');
  const reason = [status.reason, status.evaluationError]
    .filter((x): x is string => typeof x === 'string' && x !== '')
    .join('; ');
  return { allowed: status.allowed === true && status.denied !== true, reason };
}

function statusText(code: number, body: string): string {
  try {
    const s = JSON.parse(body) as { message?: unknown };
    if (typeof s.message === 'string') return `${code} ${s.message}`;
  } catch {
    // not a Status object
  }
  return `${code} ${body.slice(0, 120)}`;
}
