// The fake API server's authentication and RBAC, and the two review APIs built on them, as the
// real kube-apiserver answers them (checked against v1.20 and current):
// - POST /apis/authentication.k8s.io/v1/tokenreviews: 201 with the TokenReview echoed and
//   status {authenticated, user{username, uid, groups, extra}} for a known token, status
//   {user:{}} for an unknown one; the caller needs "create" tokenreviews (system:auth-delegator).
// - POST /apis/authorization.k8s.io/v1/subjectaccessreviews: 201 with status {allowed, reason}
//   decided by RBAC rules (verbs, apiGroups, resources with subresources, resourceNames,
//   nonResourceURLs with a trailing *, namespaced when granted by a RoleBinding); 422 when neither
//   user nor groups, or not exactly one of resource/non-resource attributes, is given.
// Tokens map to users with addToken; `grant` binds rules to a user or a group.
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

export class FakeAccess {
  private readonly tokens = new Map<string, FakeUser>();
  private grants: Grant[] = [];
  /** Every review asked for, in order. */
  readonly log: { kind: 'TokenReview' | 'SubjectAccessReview'; spec: unknown; caller: string }[] = [];

  addToken(token: string, user: FakeUser): void {
    this.tokens.set(token, user);
  }

  userOf(authorization: string | undefined): FakeUser | undefined {
    const m = /^Bearer (.+)$/.exec(authorization ?? '');
    return m ? this.tokens.get(m[1]!) : undefined;
  }

  grant(g: Grant): () => void {
    this.grants.push(g);
    return () => {
      this.grants = this.grants.filter((x) => x !== g);
    };
  }

  /** RBAC's decision, with the reason the real authorizer gives for an allow. */
  decide(user: FakeUser, attrs: { resource?: ResourceAttributes; nonResource?: { path?: string; verb?: string } }): { allowed: boolean; reason?: string } {
    const groups = user.groups ?? [];
    for (const g of this.grants) {
      const s = g.subject;
      if ('user' in s ? s.user !== user.username : !groups.includes(s.group)) continue;
      if (!ruleMatches(g.rule, g.namespace, attrs)) continue;
      const who = 'user' in s ? `User "${s.user}"` : `Group "${s.group}"`;
      const by = g.namespace ? `RoleBinding "${g.binding ?? 'test'}/${g.namespace}"` : `ClusterRoleBinding "${g.binding ?? 'test'}"`;
      return { allowed: true, reason: `RBAC: allowed by ${by} of ClusterRole "${g.binding ?? 'test'}" to ${who}` };
    }
    return { allowed: false };
  }

  /** Serves the review endpoints; false when the path is not one of them. */
  handle(req: IncomingMessage, res: ServerResponse, path: string): boolean {
    const kind = path === '/apis/authentication.k8s.io/v1/tokenreviews' ? 'TokenReview' : path === '/apis/authorization.k8s.io/v1/subjectaccessreviews' ? 'SubjectAccessReview' : undefined;
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
    const [group, resource] = kind === 'TokenReview' ? ['authentication.k8s.io', 'tokenreviews'] : ['authorization.k8s.io', 'subjectaccessreviews'];
    if (!this.decide(caller, { resource: { verb: 'create', group, resource } }).allowed) {
      sendStatus(res, 403, 'Forbidden', `${resource}.${group} is forbidden: User "${caller.username}" cannot create resource "${resource}" in API group "${group}" at the cluster scope`);
      return true;
    }
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
      const spec = body.spec ?? {};
      this.log.push({ kind, spec, caller: caller.username });
      const status = kind === 'TokenReview' ? this.tokenStatus(spec) : this.accessStatus(spec, res);
      if (!status) return;
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind, apiVersion: body.apiVersion ?? `${group}/v1`, metadata: { creationTimestamp: null }, spec, status }));
    });
    return true;
  }

  private tokenStatus(spec: Record<string, unknown>): unknown {
    const user = typeof spec.token === 'string' ? this.tokens.get(spec.token) : undefined;
    if (!user) return { user: {} };
    const groups = [...(user.groups ?? []), 'system:authenticated'];
    return {
      authenticated: true,
      user: { username: user.username, ...(user.uid ? { uid: user.uid } : {}), groups, ...(user.extra ? { extra: user.extra } : {}) },
      audiences: Array.isArray(spec.audiences) && spec.audiences.length ? spec.audiences : ['https://kubernetes.default.svc'],
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
    if (!user && !groups.length) return invalid('spec.user', 'Invalid value: "": at least one of user or group must be specified');
    if (Boolean(ra) === Boolean(na)) return invalid('spec.resourceAttributes', 'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified');
    const d = this.decide({ username: user, groups }, { ...(ra ? { resource: ra } : {}), ...(na ? { nonResource: na } : {}) });
    return d.allowed ? { allowed: true, reason: d.reason } : { allowed: false };
  }
}

function ruleMatches(rule: Rule, namespace: string | undefined, attrs: { resource?: ResourceAttributes; nonResource?: { path?: string; verb?: string } }): boolean {
  const has = (list: string[] | undefined, v: string) => (list ?? []).some((x) => x === '*' || x === v);
  if (attrs.nonResource) {
    // Non-resource URLs come only from ClusterRoleBindings.
    if (namespace !== undefined) return false;
    const { path = '', verb = '' } = attrs.nonResource;
    return has(rule.verbs, verb) && (rule.nonResourceURLs ?? []).some((u) => u === path || (u.endsWith('*') && path.startsWith(u.slice(0, -1))));
  }
  const r = attrs.resource!;
  if (namespace !== undefined && r.namespace !== namespace) return false;
  const resource = r.subresource ? `${r.resource}/${r.subresource}` : (r.resource ?? '');
  if (!has(rule.verbs, r.verb ?? '') || !has(rule.apiGroups, r.group ?? '') || !has(rule.resources, resource)) return false;
  return !rule.resourceNames?.length || rule.resourceNames.includes(r.name ?? '');
}

function sendStatus(res: ServerResponse, code: number, reason: string, message: string): void {
  res.writeHead(code, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code }));
}
