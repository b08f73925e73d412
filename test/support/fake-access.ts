// The fake API server's authentication and RBAC, and the APIs built on them, as the real
// kube-apiserver answers them (checked against v1.20 and current):
// - POST /apis/authentication.k8s.io/v1/tokenreviews: 201 with the TokenReview echoed and
//   status {authenticated, user{username, uid, groups, extra}, audiences} for a known token,
//   status {user:{}} for an unknown one; the caller needs "create" tokenreviews (system:auth-delegator).
//   Audiences: a review without spec.audiences asks for the API server's own (API_AUDIENCES); a
//   token is authenticated only when its audiences intersect the asked ones, and status.audiences
//   is that intersection. Tokens from addToken (static, OIDC: audience-agnostic) have the API
//   server's audience only; a token past its expiry is refused.
// - POST /api/v1/namespaces/NS/serviceaccounts/NAME/token (TokenRequest): 201 with spec defaulted
//   (audiences: the API server's, expirationSeconds: 3600) and status {token, expirationTimestamp};
//   the caller needs "create" on serviceaccounts/token for NAME in NS; 404 for a service account
//   not added (addServiceAccount), 422 for an expiration under 10 minutes or over 2^32 s. The token
//   is the account's (system:serviceaccount:NS:NAME, groups system:serviceaccounts[:NS]) for those
//   audiences only: with other audiences it is good neither for reviews nor against this server.
// - POST /apis/authorization.k8s.io/v1/subjectaccessreviews: 201 with status {allowed, reason}
//   decided by RBAC rules (verbs, apiGroups, resources with subresources, resourceNames,
//   nonResourceURLs with a trailing *, namespaced when granted by a RoleBinding); 422 when neither
//   user nor groups, or not exactly one of resource/non-resource attributes, is given.
// Tokens map to users with addToken; `grant` binds rules to a user or a group.
import { randomBytes, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

export interface FakeUser {
  username: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

export interface Rule {
  verbs: string[];
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  nonResourceURLs?: string[];
}

export interface Grant {
  /** A user name or a group, as a RoleBinding's subject. */
  subject: { user: string } | { group: string };
  rule: Rule;
  /** Granted by a RoleBinding in this namespace; unset: a ClusterRoleBinding. */
  namespace?: string;
  /** The binding's name, for the "allowed by" reason. */
  binding?: string;
}

interface ResourceAttributes {
  namespace?: string;
  verb?: string;
  group?: string;
  resource?: string;
  subresource?: string;
  name?: string;
}

/** Largest review body the fake reads (the real server's limit is 3 MB; reviews are ~1 KB). */
const MAX_BODY = 1 << 20;

/** The API server's own audiences (--api-audiences, defaulting to the issuer). */
export const API_AUDIENCES = ['https://kubernetes.default.svc'];
/** TokenRequest's bounds on spec.expirationSeconds (ValidateTokenRequest). */
const MIN_EXPIRATION_S = 600;
const MAX_EXPIRATION_S = 2 ** 32;

interface FakeToken {
  user: FakeUser;
  audiences: string[];
  /** Minted by TokenRequest: audience-aware (its own error text) and expiring. */
  expiresAtMs?: number;
}

type Kind = 'TokenReview' | 'SubjectAccessReview' | 'TokenRequest';

export class FakeAccess {
  private readonly tokens = new Map<string, FakeToken>();
  /** Service accounts TokenRequest may mint for ("NS/NAME" → uid). */
  private readonly serviceAccounts = new Map<string, string>();
  private grants: Grant[] = [];
  /** Every review and TokenRequest asked for, in order (a TokenRequest's spec has namespace and name added). */
  readonly log: { kind: Kind; spec: unknown; caller: string }[] = [];
  /** The clock minted tokens expire by. */
  now: () => number = Date.now;

  /** A token of the API server's own audience (a static or OIDC token). */
  addToken(token: string, user: FakeUser): void {
    this.tokens.set(token, { user, audiences: API_AUDIENCES });
  }

  /** A ServiceAccount object, so TokenRequest can mint tokens of it. */
  addServiceAccount(namespace: string, name: string): void {
    if (!this.serviceAccounts.has(`${namespace}/${name}`))
      this.serviceAccounts.set(`${namespace}/${name}`, randomUUID());
  }

  /** The caller of a request to this server: only tokens for its own audience authenticate here. */
  userOf(authorization: string | undefined): FakeUser | undefined {
    const m = /^Bearer (.+)$/.exec(authorization ?? '');
    const t = m ? this.authenticate(m[1]!, API_AUDIENCES) : undefined;
    return t && 'user' in t ? t.user : undefined;
  }

  /** The token's user and the audiences it is good for among `wanted`, or the API server's error. */
  private authenticate(
    token: string,
    wanted: string[],
  ): { user: FakeUser; audiences: string[] } | { error?: string } | undefined {
    const t = this.tokens.get(token);
    if (!t) return undefined;
    // The service-account JWT authenticator's errors, aggregated by the bearer-token union.
    if (t.expiresAtMs !== undefined && t.expiresAtMs <= this.now())
      return { error: '[invalid bearer token, Token has expired.]' };
    const audiences = t.audiences.filter((a) => wanted.includes(a));
    if (audiences.length) return { user: t.user, audiences };
    if (t.expiresAtMs === undefined) return { error: 'invalid bearer token' };
    return {
      error: `[invalid bearer token, token audiences ${goQuoted(t.audiences)} is invalid for the target audiences ${goQuoted(wanted)}]`,
    };
  }

  grant(g: Grant): () => void {
    this.grants.push(g);
    return () => {
      this.grants = this.grants.filter((x) => x !== g);
    };
  }

  /** RBAC's decision, with the reason the real authorizer gives for an allow. */
  decide(
    user: FakeUser,
    attrs: { resource?: ResourceAttributes; nonResource?: { path?: string; verb?: string } },
  ): { allowed: boolean; reason?: string } {
    const groups = user.groups ?? [];
    for (const g of this.grants) {
      const s = g.subject;
      if ('user' in s ? s.user !== user.username : !groups.includes(s.group)) continue;
      if (!ruleMatches(g.rule, g.namespace, attrs)) continue;
      const who = 'user' in s ? `User "${s.user}"` : `Group "${s.group}"`;
      const by = g.namespace
        ? `RoleBinding "${g.binding ?? 'test'}/${g.namespace}"`
        : `ClusterRoleBinding "${g.binding ?? 'test'}"`;
      return { allowed: true, reason: `RBAC: allowed by ${by} of ClusterRole "${g.binding ?? 'test'}" to ${who}` };
    }
    return { allowed: false };
  }

  /** Serves the review endpoints; false when the path is not one of them. */
  handle(req: IncomingMessage, res: ServerResponse, path: string): boolean {
    const tokenRequest = /^\/api\/v1\/namespaces\/([^/]+)\/serviceaccounts\/([^/]+)\/token$/.exec(path);
    if (tokenRequest) {
      this.tokenRequest(req, res, decodeURIComponent(tokenRequest[1]!), decodeURIComponent(tokenRequest[2]!));
      return true;
    }
    const kind =
      path === '/apis/authentication.k8s.io/v1/tokenreviews'
        ? 'TokenReview'
        : path === '/apis/authorization.k8s.io/v1/subjectaccessreviews'
          ? 'SubjectAccessReview'
          : undefined;
    if (!kind) return false;
    const caller = this.userOf(req.headers.authorization);
    if (!caller) {
      sendStatus(res, 401, 'Unauthorized', 'Unauthorized');
      return true;
    }
    if (req.method !== 'POST') {
      sendStatus(res, 405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`);
      return true;
    }
    const [group, resource] =
      kind === 'TokenReview'
        ? ['authentication.k8s.io', 'tokenreviews']
        : ['authorization.k8s.io', 'subjectaccessreviews'];
    if (!this.decide(caller, { resource: { verb: 'create', group, resource } }).allowed) {
      sendStatus(
        res,
        403,
        'Forbidden',
        `${resource}.${group} is forbidden: User "${caller.username}" cannot create resource "${resource}" in API group "${group}" at the cluster scope`,
      );
      return true;
    }
    readBody(req, res, (body) => {
      const spec = body.spec ?? {};
      this.log.push({ kind, spec, caller: caller.username });
      const status = kind === 'TokenReview' ? this.tokenStatus(spec) : this.accessStatus(spec, res);
      if (!status) return;
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          kind,
          apiVersion: body.apiVersion ?? `${group}/v1`,
          metadata: { creationTimestamp: null },
          spec,
          status,
        }),
      );
    });
    return true;
  }

  /** TokenRequest: a token of service account NS/NAME for the asked audiences, as pkg/registry/core/serviceaccount/storage/token.go mints it. */
  private tokenRequest(req: IncomingMessage, res: ServerResponse, namespace: string, name: string): void {
    const caller = this.userOf(req.headers.authorization);
    if (!caller) return sendStatus(res, 401, 'Unauthorized', 'Unauthorized');
    if (req.method !== 'POST')
      return sendStatus(
        res,
        405,
        'MethodNotAllowed',
        'the server does not allow this method on the requested resource',
      );
    const attrs = { verb: 'create', group: '', resource: 'serviceaccounts', subresource: 'token', namespace, name };
    if (!this.decide(caller, { resource: attrs }).allowed) {
      return sendStatus(
        res,
        403,
        'Forbidden',
        `serviceaccounts "${name}" is forbidden: User "${caller.username}" cannot create resource "serviceaccounts/token" in API group "" in the namespace "${namespace}"`,
      );
    }
    readBody(req, res, (body) => {
      if (body.kind !== undefined && body.kind !== 'TokenRequest')
        return sendStatus(
          res,
          400,
          'BadRequest',
          `the body of the request was in an unknown format: kind ${JSON.stringify(body.kind)} is not TokenRequest`,
        );
      const spec = body.spec ?? {};
      this.log.push({ kind: 'TokenRequest', spec: { ...spec, namespace, name }, caller: caller.username });
      const invalid = (field: string, why: string) =>
        sendStatus(res, 422, 'Invalid', `TokenRequest.authentication.k8s.io "${name}" is invalid: ${field}: ${why}`);
      const expirationSeconds = spec.expirationSeconds ?? 3600;
      if (typeof expirationSeconds !== 'number' || !Number.isInteger(expirationSeconds))
        return sendStatus(res, 400, 'BadRequest', 'spec.expirationSeconds must be an integer');
      if (expirationSeconds < MIN_EXPIRATION_S)
        return invalid(
          'spec.expirationSeconds',
          `Invalid value: ${expirationSeconds}: may not specify a duration less than 10 minutes`,
        );
      if (expirationSeconds > MAX_EXPIRATION_S)
        return invalid(
          'spec.expirationSeconds',
          `Invalid value: ${expirationSeconds}: may not specify a duration larger than 2^32 seconds`,
        );
      const asked = Array.isArray(spec.audiences)
        ? spec.audiences.filter((a): a is string => typeof a === 'string')
        : [];
      const audiences = asked.length ? asked : API_AUDIENCES;
      const uid = this.serviceAccounts.get(`${namespace}/${name}`);
      if (!uid) return sendStatus(res, 404, 'NotFound', `serviceaccounts "${name}" not found`);
      // A JWT's exp has whole seconds, and so does the answer's expirationTimestamp.
      const expiresAtMs = Math.floor(this.now() / 1000) * 1000 + expirationSeconds * 1000;
      const token = `fake-sa.${randomBytes(24).toString('base64url')}`;
      this.tokens.set(token, {
        user: {
          username: `system:serviceaccount:${namespace}:${name}`,
          uid,
          groups: ['system:serviceaccounts', `system:serviceaccounts:${namespace}`],
        },
        audiences,
        expiresAtMs,
      });
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          kind: 'TokenRequest',
          apiVersion: 'authentication.k8s.io/v1',
          metadata: { name, namespace, creationTimestamp: null },
          spec: { audiences, expirationSeconds, boundObjectRef: null },
          status: { token, expirationTimestamp: new Date(expiresAtMs).toISOString().replace(/\.\d{3}Z$/, 'Z') },
        }),
      );
    });
  }

  private tokenStatus(spec: Record<string, unknown>): unknown {
    // No spec.audiences: the API server's own (pkg/registry/authentication/tokenreview/storage.go).
    const asked = Array.isArray(spec.audiences) ? spec.audiences.filter((a): a is string => typeof a === 'string') : [];
    const t =
      typeof spec.token === 'string' ? this.authenticate(spec.token, asked.length ? asked : API_AUDIENCES) : undefined;
    if (!t) return { user: {} };
    if (!('user' in t)) return { user: {}, error: t.error };
    const user = t.user;
    const groups = [...(user.groups ?? []), 'system:authenticated'];
    return {
      authenticated: true,
      user: {
        username: user.username,
        ...(user.uid ? { uid: user.uid } : {}),
        groups,
        ...(user.extra ? { extra: user.extra } : {}),
      },
      audiences: t.audiences,
    };
  }

  private accessStatus(spec: Record<string, unknown>, res: ServerResponse): unknown {
    const user = typeof spec.user === 'string' ? spec.user : '';
    const groups = Array.isArray(spec.groups) ? spec.groups.filter((g): g is string => typeof g === 'string') : [];
    const ra = spec.resourceAttributes as ResourceAttributes | undefined;
    const na = spec.nonResourceAttributes as { path?: string; verb?: string } | undefined;
    const invalid = (field: string, why: string) => {
      sendStatus(res, 422, 'Invalid', `SubjectAccessReview.authorization.k8s.io "" is invalid: ${field}: ${why}`);
      return undefined;
    };
    if (!user && !groups.length)
      return invalid('spec.user', 'Invalid value: "": at least one of user or group must be specified');
    if (Boolean(ra) === Boolean(na))
      return invalid(
        'spec.resourceAttributes',
        'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified',
      );
    const d = this.decide(
      { username: user, groups },
      { ...(ra ? { resource: ra } : {}), ...(na ? { nonResource: na } : {}) },
    );
    return d.allowed ? { allowed: true, reason: d.reason } : { allowed: false };
  }
}

function ruleMatches(
  rule: Rule,
  namespace: string | undefined,
  attrs: { resource?: ResourceAttributes; nonResource?: { path?: string; verb?: string } },
): boolean {
  const has = (list: string[] | undefined, v: string) => (list ?? []).some((x) => x === '*' || x === v);
  if (attrs.nonResource) {
    // Non-resource URLs come only from ClusterRoleBindings.
    if (namespace !== undefined) return false;
    const { path = '', verb = '' } = attrs.nonResource;
    return (
      has(rule.verbs, verb) &&
      (rule.nonResourceURLs ?? []).some((u) => u === path || (u.endsWith('*') && path.startsWith(u.slice(0, -1))))
    );
  }
  const r = attrs.resource!;
  if (namespace !== undefined && r.namespace !== namespace) return false;
  const resource = r.subresource ? `${r.resource}/${r.subresource}` : (r.resource ?? '');
  if (!has(rule.verbs, r.verb ?? '') || !has(rule.apiGroups, r.group ?? '') || !has(rule.resources, resource))
    return false;
  return !rule.resourceNames?.length || rule.resourceNames.includes(r.name ?? '');
}

/** The request's JSON body (at most MAX_BODY read), or 400 as the API server answers bad JSON. */
function readBody(
  req: IncomingMessage,
  res: ServerResponse,
  then: (body: { apiVersion?: string; kind?: string; spec?: Record<string, unknown> }) => void,
): void {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on('data', (b: Buffer) => {
    size += b.length;
    if (size <= MAX_BODY) chunks.push(b);
  });
  req.on('end', () => {
    let body: { apiVersion?: string; kind?: string; spec?: Record<string, unknown> };
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as typeof body;
    } catch (e) {
      return sendStatus(res, 400, 'BadRequest', `couldn't get version/kind; json parse error: ${(e as Error).message}`);
    }
    then(body);
  });
}

/** A string list as Go's %q prints it: ["a" "b"]. */
function goQuoted(list: string[]): string {
  return `[${list.map((x) => JSON.stringify(x)).join(' ')}]`;
}

function sendStatus(res: ServerResponse, code: number, reason: string, message: string): void {
  res.writeHead(code, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code }));
}
