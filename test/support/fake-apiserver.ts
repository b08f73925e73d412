// A small Kubernetes API server for tests of the cluster watcher, speaking the
// real list/watch JSON over HTTP on 127.0.0.1:
// - GET <collection>                → a typed list (items without kind, like the API),
//   metadata.resourceVersion, limit/continue paging, fieldSelector metadata.name=...
// - GET <collection>?watch=1       → newline-delimited watch events (ADDED, MODIFIED,
//   DELETED, BOOKMARK, ERROR) from resourceVersion, with timeoutSeconds;
//   a resourceVersion older than the compacted history gets an ERROR event
//   with a 410 Expired Status, as the real API server sends it.
// - the namespaced form of each collection (/api/v1/namespaces/NS/pods), and
//   labelSelector (k=v, k==v, k!=v, k, !k; comma = and) on lists and watches.
// - POST-less pod exec, as the real API server does it: a WebSocket upgrade of
//   GET /api/v1/namespaces/NS/pods/NAME/exec?command=..&container=..&stdout=true,
//   subprotocol v5/v4.channel.k8s.io, output frames on channels 1/2 and a
//   metav1.Status on channel 3 (Success, or Failure/NonZeroExitCode with the
//   code in details.causes), then a normal close. The test supplies the process
//   to run (onExec); refusals are the API server's: 401, 403 per pod
//   (forbidExec), 404 unknown pod, 400 wrong container / pod not running.
// - the service proxy, GET /api/v1/namespaces/NS/services/NAME[:PORT]/proxy/PATH: authorized as
//   "get" services/proxy on NAME[:PORT] (fake-access.ts grants), the caller's Authorization header
//   removed (the real server drops it once it authenticated the request), other headers, the path
//   and the query passed on, the answer streamed back; the test names where a Service's endpoint
//   listens (onServiceProxy), else 503 "no endpoints available".
// - TokenReview (with audiences), SubjectAccessReview and TokenRequest
//   (POST /api/v1/namespaces/NS/serviceaccounts/NAME/token) with RBAC-like grants (fake-access.ts).
//   The kubeconfig's user "tester" (token fake-token) may create both reviews, as
//   system:auth-delegator allows; TokenRequest needs a grant and a service account (access.addServiceAccount).
// It can be stopped (all connections cut) and started again on the same port.
import type { ChildProcess } from 'node:child_process';
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { constants } from 'node:os';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import { FakeAccess } from './fake-access.js';

export type ResourceName = 'services' | 'endpointslices' | 'ingresses' | 'nodes' | 'pods';

interface ResourceType {
  path: string;
  kind: string;
  apiVersion: string;
  namespaced: boolean;
}

export const RESOURCES: Record<ResourceName, ResourceType> = {
  services: { path: '/api/v1/services', kind: 'Service', apiVersion: 'v1', namespaced: true },
  endpointslices: {
    path: '/apis/discovery.k8s.io/v1/endpointslices',
    kind: 'EndpointSlice',
    apiVersion: 'discovery.k8s.io/v1',
    namespaced: true,
  },
  ingresses: {
    path: '/apis/networking.k8s.io/v1/ingresses',
    kind: 'Ingress',
    apiVersion: 'networking.k8s.io/v1',
    namespaced: true,
  },
  nodes: { path: '/api/v1/nodes', kind: 'Node', apiVersion: 'v1', namespaced: false },
  pods: { path: '/api/v1/pods', kind: 'Pod', apiVersion: 'v1', namespaced: true },
};

/** Which objects a list or watch asked for. */
interface Selector {
  name?: string;
  namespace?: string;
  labels?: LabelRequirement[];
}

interface LabelRequirement {
  key: string;
  op: '=' | '!=' | 'exists' | '!exists';
  value?: string;
}

/** One exec the client asked for, as the API server parsed it. */
export interface ExecCall {
  namespace: string;
  pod: string;
  container: string;
  command: string[];
  /** The negotiated subprotocol. */
  protocol: string;
  query: Record<string, string[]>;
}

/** Starts the process an exec runs; its stdout/stderr/exit become frames. */
export type ExecRunner = (call: ExecCall) => ChildProcess;

/** Subprotocols whose channel 3 is a JSON Status, in the API server's preference order. */
const EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'];

type Obj = {
  metadata: { name: string; namespace?: string; resourceVersion?: string; [k: string]: unknown };
  [k: string]: unknown;
};
type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

interface StoredEvent {
  rv: number;
  type: EventType;
  object: Obj;
}

interface Watcher {
  resource: ResourceName;
  sel: Selector;
  res: ServerResponse;
  bookmarks: boolean;
}

/** One line of the request log, for assertions such as "the client relisted". */
export interface LoggedRequest {
  resource: ResourceName;
  watch: boolean;
  query: Record<string, string>;
}

export class FakeApiServer {
  private rv = 1;
  /** Events at or below this resourceVersion are forgotten: watching from before it gets 410. */
  private compactedRv = 0;
  private readonly objects = new Map<ResourceName, Map<string, Obj>>();
  private readonly history = new Map<ResourceName, StoredEvent[]>();
  private readonly watchers = new Set<Watcher>();
  private readonly sockets = new Set<Socket>();
  private readonly forbidden = new Set<ResourceName>();
  private readonly forbiddenExec = new Set<string>();
  private readonly wss = new WebSocketServer({
    noServer: true,
    handleProtocols: (offered) => EXEC_PROTOCOLS.find((p) => offered.has(p)) ?? false,
  });
  /** Runs the command of each accepted exec; unset, execs are refused with 500. */
  onExec?: ExecRunner;
  /** Every exec that reached a process, in order. */
  readonly execs: ExecCall[] = [];
  private server?: Server;
  private boundPort = 0;
  readonly requests: LoggedRequest[] = [];
  /** Watches answered with 410 Expired. */
  expiredWatches = 0;
  /** Where a proxied Service's endpoint listens on loopback (a relay into a namespace), or undefined for none. */
  onServiceProxy?: (namespace: string, name: string) => { port: number } | undefined;
  /** Tokens, users and RBAC grants, and the review APIs on them. */
  readonly access = new FakeAccess();
  /** Revokes tester's right to create reviews (the agent's ClusterRoleBinding missing). */
  readonly revokeReviews: () => void;
  /**
   * The group version EndpointSlices are served in: v1 (1.21+), v1beta1 only (1.17-1.20, where
   * /apis/discovery.k8s.io/v1/... is 404), or none (1.16 and older).
   */
  endpointSliceVersion: 'v1' | 'v1beta1' | 'none' = 'v1';

  /** A resource as this server serves it now (EndpointSlices move with endpointSliceVersion). */
  private typeOf(resource: ResourceName): ResourceType {
    const t = RESOURCES[resource];
    if (resource !== 'endpointslices' || this.endpointSliceVersion === 'v1') return t;
    const v = this.endpointSliceVersion === 'v1beta1' ? 'v1beta1' : 'v0none';
    return { ...t, path: `/apis/discovery.k8s.io/${v}/endpointslices`, apiVersion: `discovery.k8s.io/${v}` };
  }

  constructor() {
    this.access.addToken('fake-token', { username: 'tester', uid: 'tester-uid', groups: ['testers'] });
    this.revokeReviews = this.access.grant({
      subject: { user: 'tester' },
      binding: 'system:auth-delegator',
      rule: {
        verbs: ['create'],
        apiGroups: ['authentication.k8s.io', 'authorization.k8s.io'],
        resources: ['tokenreviews', 'subjectaccessreviews'],
      },
    });
    for (const r of Object.keys(RESOURCES) as ResourceName[]) {
      this.objects.set(r, new Map());
      this.history.set(r, []);
    }
  }

  /** Listens on 127.0.0.1; port 0 the first time picks one, later starts reuse it. */
  async start(port = this.boundPort): Promise<void> {
    const server = createServer((req, res) => this.handle(req, res));
    server.on('upgrade', (req, socket, head) => this.handleUpgrade(req, socket, head));
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    this.server = server;
    this.boundPort = (server.address() as AddressInfo).port;
  }

  /** The API going away: stop listening and cut every connection, watches included. */
  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    this.watchers.clear();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
  }

  get url(): string {
    return `http://127.0.0.1:${this.boundPort}`;
  }

  /** A kubeconfig for this server (plain HTTP needs insecure-skip-tls-verify in client-node). */
  kubeconfig(token = 'fake-token'): string {
    return [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: fake',
      '  cluster:',
      `    server: ${this.url}`,
      '    insecure-skip-tls-verify: true',
      'users:',
      '- name: tester',
      '  user:',
      `    token: ${token}`,
      'contexts:',
      '- name: fake',
      '  context:',
      '    cluster: fake',
      '    user: tester',
      'current-context: fake',
      '',
    ].join('\n');
  }

  currentResourceVersion(): string {
    return String(this.rv);
  }

  /** Creates or replaces an object; watchers get ADDED or MODIFIED. */
  apply(resource: ResourceName, input: object): void {
    const object = input as Obj;
    const key = keyOf(object);
    const type: EventType = this.objects.get(resource)!.has(key) ? 'MODIFIED' : 'ADDED';
    this.record(resource, type, object);
  }

  delete(resource: ResourceName, namespace: string | undefined, name: string): void {
    const key = namespace ? `${namespace}/${name}` : name;
    const old = this.objects.get(resource)!.get(key);
    if (!old) throw new Error(`fake apiserver: no ${resource} ${key}`);
    this.record(resource, 'DELETED', old);
  }

  /** Forgets all history so far (etcd compaction): resuming a watch from an older version gets 410 Gone. */
  compact(): void {
    this.compactedRv = this.rv;
    for (const h of this.history.values()) h.length = 0;
  }

  /** Answers list and watch of `resource` with 403 Forbidden (an RBAC rule missing). */
  forbid(resource: ResourceName, on = true): void {
    if (on) this.forbidden.add(resource);
    else this.forbidden.delete(resource);
  }

  /** Refuses exec into `pod` (namespace/name) with 403, as RBAC without create pods/exec does. */
  forbidExec(namespace: string, pod: string, on = true): void {
    if (on) this.forbiddenExec.add(`${namespace}/${pod}`);
    else this.forbiddenExec.delete(`${namespace}/${pod}`);
  }

  /** Sends a BOOKMARK at the current resourceVersion to every watcher that asked for bookmarks. */
  bookmark(): void {
    for (const w of this.watchers) {
      if (!w.bookmarks) continue;
      const t = this.typeOf(w.resource);
      writeEvent(w.res, 'BOOKMARK', {
        kind: t.kind,
        apiVersion: t.apiVersion,
        metadata: { resourceVersion: String(this.rv) },
      });
    }
  }

  /** Ends every watch stream normally (as timeoutSeconds does); clients resume from their last version. */
  endWatches(): void {
    for (const w of this.watchers) w.res.end();
    this.watchers.clear();
  }

  watcherCount(resource?: ResourceName): number {
    return [...this.watchers].filter((w) => resource === undefined || w.resource === resource).length;
  }

  private record(resource: ResourceName, type: EventType, object: Obj): void {
    this.rv++;
    const t = this.typeOf(resource);
    const stored: Obj = {
      ...structuredClone(object),
      kind: t.kind,
      apiVersion: t.apiVersion,
      metadata: { ...structuredClone(object.metadata), resourceVersion: String(this.rv) },
    };
    const key = keyOf(stored);
    if (type === 'DELETED') this.objects.get(resource)!.delete(key);
    else this.objects.get(resource)!.set(key, stored);
    const ev: StoredEvent = { rv: this.rv, type, object: stored };
    this.history.get(resource)!.push(ev);
    for (const w of this.watchers)
      if (w.resource === resource && matches(w.sel, stored)) writeEvent(w.res, type, stored);
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    if (this.access.handle(req, res, url.pathname)) return;
    const proxy = /^\/api\/v1\/namespaces\/([^/]+)\/services\/([^/]+)\/proxy(\/.*)?$/.exec(url.pathname);
    if (proxy) return this.serviceProxy(req, res, proxy[1]!, proxy[2]!, `${proxy[3] ?? '/'}${url.search}`);
    // /api/v1/namespaces/NS/pods → the collection /api/v1/pods, only NS.
    const nsPath = /^(\/api\/v1|\/apis\/[^/]+\/[^/]+)\/namespaces\/([^/]+)\/([^/]+)$/.exec(url.pathname);
    const path = nsPath ? `${nsPath[1]}/${nsPath[3]}` : url.pathname;
    const entry = (Object.keys(RESOURCES) as ResourceName[])
      .map((r) => [r, this.typeOf(r)] as const)
      .find(([, t]) => t.path === path && (!nsPath || t.namespaced));
    if (!entry)
      return sendStatus(res, 404, 'NotFound', `the server could not find the requested resource (${url.pathname})`);
    const resource = entry[0] as ResourceName;
    const namespace = nsPath?.[2];
    const q = Object.fromEntries(url.searchParams);
    const watch = q.watch === '1' || q.watch === 'true';
    this.requests.push({ resource, watch, query: q });
    if (req.headers.authorization !== 'Bearer fake-token') return sendStatus(res, 401, 'Unauthorized', 'Unauthorized');
    if (this.forbidden.has(resource)) {
      const scope = namespace ? `in the namespace "${namespace}"` : 'at the cluster scope';
      return sendStatus(
        res,
        403,
        'Forbidden',
        `${resource} is forbidden: User "tester" cannot ${watch ? 'watch' : 'list'} resource "${resource}" in API group "" ${scope}`,
      );
    }
    const sel: Selector = namespace ? { namespace } : {};
    if (q.fieldSelector) {
      const m = /^metadata\.name=(.+)$/.exec(q.fieldSelector);
      if (!m) return sendStatus(res, 400, 'BadRequest', `field label not supported: ${q.fieldSelector}`);
      sel.name = m[1];
    }
    if (q.labelSelector) {
      const labels = parseLabelSelector(q.labelSelector);
      if (!labels)
        return sendStatus(res, 400, 'BadRequest', `unable to parse requirement: ${JSON.stringify(q.labelSelector)}`);
      sel.labels = labels;
    }
    if (watch) this.serveWatch(resource, sel, q, res);
    else this.serveList(resource, sel, q, res);
  }

  private serviceProxy(
    req: IncomingMessage,
    res: ServerResponse,
    namespace: string,
    nameAndPort: string,
    path: string,
  ): void {
    const caller = this.access.userOf(req.headers.authorization);
    if (!caller) return sendStatus(res, 401, 'Unauthorized', 'Unauthorized');
    const verb =
      req.method === 'GET' || req.method === 'HEAD'
        ? 'get'
        : req.method === 'POST'
          ? 'create'
          : (req.method ?? '').toLowerCase();
    const attrs = { verb, group: '', resource: 'services', subresource: 'proxy', namespace, name: nameAndPort };
    if (!this.access.decide(caller, { resource: attrs }).allowed) {
      return sendStatus(
        res,
        403,
        'Forbidden',
        `services "${nameAndPort}" is forbidden: User "${caller.username}" cannot ${verb} resource "services/proxy" in API group "" in the namespace "${namespace}"`,
      );
    }
    const name = nameAndPort.split(':')[0]!;
    if (!this.objects.get('services')!.has(`${namespace}/${name}`))
      return sendStatus(res, 404, 'NotFound', `services "${name}" not found`);
    const target = this.onServiceProxy?.(namespace, name);
    if (!target) return sendStatus(res, 503, 'ServiceUnavailable', `no endpoints available for service "${name}"`);
    const { authorization: _dropped, host: _host, connection: _c, ...headers } = req.headers;
    const upstream = httpRequest({ host: '127.0.0.1', port: target.port, method: req.method, path, headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      res.flushHeaders();
      up.pipe(res);
    });
    upstream.on('error', (e) =>
      res.headersSent
        ? res.destroy()
        : sendStatus(res, 503, 'ServiceUnavailable', `error trying to reach service: ${e.message}`),
    );
    res.on('close', () => upstream.destroy());
    req.pipe(upstream);
  }

  /** The exec subresource: checks in the API server's order, then a WebSocket running onExec's process. */
  private handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const refuse = (code: number, reason: string, message: string): void => {
      const body = JSON.stringify({
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message,
        reason,
        code,
      });
      socket.end(
        `HTTP/1.1 ${code} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    };
    if (req.headers.authorization !== 'Bearer fake-token') return refuse(401, 'Unauthorized', 'Unauthorized');
    const m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/exec$/.exec(url.pathname);
    if (!m) return refuse(404, 'NotFound', `the server could not find the requested resource (${url.pathname})`);
    const [, namespace, name] = m as unknown as [string, string, string];
    if (this.forbiddenExec.has(`${namespace}/${name}`)) {
      return refuse(
        403,
        'Forbidden',
        `pods "${name}" is forbidden: User "tester" cannot create resource "pods/exec" in API group "" in the namespace "${namespace}"`,
      );
    }
    const pod = this.objects.get('pods')!.get(`${namespace}/${name}`) as
      | (Obj & { spec?: { containers?: { name: string }[] }; status?: { phase?: string } })
      | undefined;
    if (!pod) return refuse(404, 'NotFound', `pods "${name}" not found`);
    const command = url.searchParams.getAll('command');
    const container = url.searchParams.get('container') ?? pod.spec?.containers?.[0]?.name ?? '';
    if (!pod.spec?.containers?.some((c) => c.name === container))
      return refuse(400, 'BadRequest', `container ${container} is not valid for pod ${name}`);
    if (pod.status?.phase !== 'Running')
      return refuse(400, 'BadRequest', `pod ${name} is not running (phase ${pod.status?.phase})`);
    if (!command.length) return refuse(400, 'BadRequest', 'you must specify at least one command for the container');
    if (!['stdout', 'stderr', 'stdin'].some((k) => url.searchParams.get(k) === 'true')) {
      return refuse(400, 'BadRequest', 'you must specify at least 1 of stdin, stdout, stderr');
    }
    const offered = (req.headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim());
    if (!EXEC_PROTOCOLS.some((p) => offered.includes(p)))
      return refuse(400, 'BadRequest', `no supported subprotocol in ${JSON.stringify(offered)}`);
    if (!this.onExec) return refuse(500, 'InternalError', 'fake apiserver: no onExec runner set');
    const runner = this.onExec;
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      const query: Record<string, string[]> = {};
      for (const [k, v] of url.searchParams) query[k] = [...(query[k] ?? []), v];
      const call: ExecCall = { namespace, pod: name, container, command, protocol: ws.protocol, query };
      this.execs.push(call);
      runExec(ws, runner(call), url.searchParams.get('stdout') === 'true', url.searchParams.get('stderr') === 'true');
    });
  }

  private serveList(resource: ResourceName, sel: Selector, q: Record<string, string>, res: ServerResponse): void {
    const t = this.typeOf(resource);
    const all = [...this.objects.get(resource)!.values()]
      .filter((o) => matches(sel, o))
      .sort((a, b) => (keyOf(a) < keyOf(b) ? -1 : 1));
    let listRv = this.rv;
    let offset = 0;
    if (q.continue) {
      const token = JSON.parse(Buffer.from(q.continue, 'base64').toString()) as { rv: number; offset: number };
      if (token.rv < this.compactedRv) {
        return sendStatus(
          res,
          410,
          'Expired',
          'The provided continue parameter is too old to display a consistent list result.',
        );
      }
      listRv = token.rv;
      offset = token.offset;
    }
    const limit = q.limit ? Number(q.limit) : all.length;
    const page = all.slice(offset, offset + limit);
    const metadata: Record<string, string> = { resourceVersion: String(listRv) };
    if (offset + limit < all.length)
      metadata.continue = Buffer.from(JSON.stringify({ rv: listRv, offset: offset + limit })).toString('base64');
    // List items carry no kind/apiVersion: the list's kind says it.
    const items = page.map(({ kind: _k, apiVersion: _a, ...rest }) => rest);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kind: `${t.kind}List`, apiVersion: t.apiVersion, metadata, items }));
  }

  private serveWatch(resource: ResourceName, sel: Selector, q: Record<string, string>, res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    // The API server answers a watch at once, before any event.
    res.flushHeaders();
    const from = q.resourceVersion;
    if (from !== undefined && from !== '' && from !== '0' && Number(from) < this.compactedRv) {
      this.expiredWatches++;
      writeEvent(res, 'ERROR', {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message: `too old resource version: ${from} (${this.compactedRv})`,
        reason: 'Expired',
        code: 410,
      });
      res.end();
      return;
    }
    const w: Watcher = { resource, sel, res, bookmarks: q.allowWatchBookmarks === 'true' };
    if (from === undefined || from === '' || from === '0') {
      // "Any version": start with the current state as ADDED events.
      for (const o of this.objects.get(resource)!.values()) if (matches(sel, o)) writeEvent(res, 'ADDED', o);
    } else {
      for (const ev of this.history.get(resource)!) {
        if (ev.rv > Number(from) && matches(sel, ev.object)) writeEvent(res, ev.type, ev.object);
      }
    }
    this.watchers.add(w);
    const timeout = q.timeoutSeconds ? setTimeout(() => res.end(), Number(q.timeoutSeconds) * 1000) : undefined;
    res.on('close', () => {
      clearTimeout(timeout);
      this.watchers.delete(w);
    });
  }
}

function keyOf(o: Obj): string {
  return o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;
}

function matches(sel: Selector, o: Obj): boolean {
  if (sel.name !== undefined && o.metadata.name !== sel.name) return false;
  if (sel.namespace !== undefined && o.metadata.namespace !== sel.namespace) return false;
  const labels = (o.metadata.labels ?? {}) as Record<string, string>;
  return (sel.labels ?? []).every((r) => {
    const has = Object.hasOwn(labels, r.key);
    if (r.op === 'exists') return has;
    if (r.op === '!exists') return !has;
    return r.op === '=' ? labels[r.key] === r.value : labels[r.key] !== r.value;
  });
}

/** Equality-based label selectors; undefined when malformed (set-based `in (...)` is not supported). */
function parseLabelSelector(text: string): LabelRequirement[] | undefined {
  const key = '[A-Za-z0-9][-A-Za-z0-9_./]*';
  const out: LabelRequirement[] = [];
  for (const part of text.split(',').map((p) => p.trim())) {
    const eq = new RegExp(`^(${key})\\s*(==|=|!=)\\s*([-A-Za-z0-9_.]*)$`).exec(part);
    const ex = new RegExp(`^(!?)(${key})$`).exec(part);
    if (eq) out.push({ key: eq[1]!, op: eq[2] === '!=' ? '!=' : '=', value: eq[3]! });
    else if (ex) out.push({ key: ex[2]!, op: ex[1] ? '!exists' : 'exists' });
    else return undefined;
  }
  return out;
}

/** Frames a process's output on channels 1 and 2, then its exit Status on channel 3, then closes. */
function runExec(ws: WebSocket, proc: ChildProcess, stdout: boolean, stderr: boolean): void {
  const frame = (channel: number, data: Buffer) => {
    if (ws.readyState === ws.OPEN) ws.send(Buffer.concat([Buffer.from([channel]), data]));
  };
  proc.stdout?.on('data', (b: Buffer) => stdout && frame(1, b));
  proc.stderr?.on('data', (b: Buffer) => stderr && frame(2, b));
  // The client going away ends the command, as the kubelet does when the stream breaks.
  ws.on('close', () => proc.exitCode === null && proc.signalCode === null && proc.kill('SIGKILL'));
  proc.on('error', (e) => {
    frame(
      3,
      Buffer.from(
        JSON.stringify({
          metadata: {},
          status: 'Failure',
          message: `exec failed: ${e.message}`,
          reason: 'InternalError',
          code: 500,
        }),
      ),
    );
    ws.close(1000);
  });
  proc.on('close', (code, signal) => {
    // A signalled process reports 128 + signal number, as a shell would.
    const exit = code ?? 128 + (signal ? constants.signals[signal] : 0);
    const status =
      exit === 0
        ? { metadata: {}, status: 'Success' }
        : {
            metadata: {},
            status: 'Failure',
            message: `command terminated with non-zero exit code: error executing command, exit code ${exit}`,
            reason: 'NonZeroExitCode',
            details: { causes: [{ reason: 'ExitCode', message: String(exit) }] },
          };
    frame(3, Buffer.from(JSON.stringify(status)));
    ws.close(1000);
  });
}

function writeEvent(res: ServerResponse, type: string, object: unknown): void {
  res.write(`${JSON.stringify({ type, object })}\n`);
}

function sendStatus(res: ServerResponse, code: number, reason: string, message: string): void {
  res.writeHead(code, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code }));
}
