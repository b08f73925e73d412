// A small Kubernetes API server for tests of the cluster watcher, speaking the
// real list/watch JSON over HTTP on 127.0.0.1:
// - GET <collection>                → a typed list (items without kind, like the API),
//   metadata.resourceVersion, limit/continue paging, fieldSelector metadata.name=...
// - GET <collection>?watch=1       → newline-delimited watch events (ADDED, MODIFIED,
//   DELETED, BOOKMARK, ERROR) from resourceVersion, with timeoutSeconds;
//   a resourceVersion older than the compacted history gets an ERROR event
//   with a 410 Expired Status, as the real API server sends it.
// It can be stopped (all connections cut) and started again on the same port.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export type ResourceName = 'services' | 'endpointslices' | 'ingresses' | 'nodes';

interface ResourceType {
  path: string;
  kind: string;
  apiVersion: string;
  namespaced: boolean;
}

export const RESOURCES: Record<ResourceName, ResourceType> = {
  services: { path: '/api/v1/services', kind: 'Service', apiVersion: 'v1', namespaced: true },
  endpointslices: { path: '/apis/discovery.k8s.io/v1/endpointslices', kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1', namespaced: true },
  ingresses: { path: '/apis/networking.k8s.io/v1/ingresses', kind: 'Ingress', apiVersion: 'networking.k8s.io/v1', namespaced: true },
  nodes: { path: '/api/v1/nodes', kind: 'Node', apiVersion: 'v1', namespaced: false },
};

type Obj = { metadata: { name: string; namespace?: string; resourceVersion?: string; [k: string]: unknown }; [k: string]: unknown };
type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

interface StoredEvent {
  rv: number;
  type: EventType;
  object: Obj;
}

interface Watcher {
  resource: ResourceName;
  nameSelector?: string;
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
  private server?: Server;
  private boundPort = 0;
  readonly requests: LoggedRequest[] = [];
  /** Watches answered with 410 Expired. */
  expiredWatches = 0;

  constructor() {
    for (const r of Object.keys(RESOURCES) as ResourceName[]) {
      this.objects.set(r, new Map());
      this.history.set(r, []);
    }
  }

  /** Listens on 127.0.0.1; port 0 the first time picks one, later starts reuse it. */
  async start(port = this.boundPort): Promise<void> {
    const server = createServer((req, res) => this.handle(req, res));
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
  kubeconfig(): string {
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
      '    token: fake-token',
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

  /** Sends a BOOKMARK at the current resourceVersion to every watcher that asked for bookmarks. */
  bookmark(): void {
    for (const w of this.watchers) {
      if (!w.bookmarks) continue;
      const t = RESOURCES[w.resource];
      writeEvent(w.res, 'BOOKMARK', { kind: t.kind, apiVersion: t.apiVersion, metadata: { resourceVersion: String(this.rv) } });
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
    const t = RESOURCES[resource];
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
    for (const w of this.watchers) if (w.resource === resource && matches(w.nameSelector, stored)) writeEvent(w.res, type, stored);
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const entry = Object.entries(RESOURCES).find(([, t]) => t.path === url.pathname);
    if (!entry) return sendStatus(res, 404, 'NotFound', `the server could not find the requested resource (${url.pathname})`);
    const resource = entry[0] as ResourceName;
    const q = Object.fromEntries(url.searchParams);
    const watch = q.watch === '1' || q.watch === 'true';
    this.requests.push({ resource, watch, query: q });
    if (req.headers.authorization !== 'Bearer fake-token') return sendStatus(res, 401, 'Unauthorized', 'Unauthorized');
    if (this.forbidden.has(resource)) {
      return sendStatus(res, 403, 'Forbidden', `${resource} is forbidden: User "tester" cannot ${watch ? 'watch' : 'list'} resource "${resource}" at the cluster scope`);
    }
    let nameSelector: string | undefined;
    if (q.fieldSelector) {
      const m = /^metadata\.name=(.+)$/.exec(q.fieldSelector);
      if (!m) return sendStatus(res, 400, 'BadRequest', `field label not supported: ${q.fieldSelector}`);
      nameSelector = m[1];
    }
    if (watch) this.serveWatch(resource, nameSelector, q, res);
    else this.serveList(resource, nameSelector, q, res);
  }

  private serveList(resource: ResourceName, nameSelector: string | undefined, q: Record<string, string>, res: ServerResponse): void {
    const t = RESOURCES[resource];
    const all = [...this.objects.get(resource)!.values()].filter((o) => matches(nameSelector, o)).sort((a, b) => (keyOf(a) < keyOf(b) ? -1 : 1));
    let listRv = this.rv;
    let offset = 0;
    if (q.continue) {
      const token = JSON.parse(Buffer.from(q.continue, 'base64').toString()) as { rv: number; offset: number };
      if (token.rv < this.compactedRv) {
        return sendStatus(res, 410, 'Expired', 'The provided continue parameter is too old to display a consistent list result.');
      }
      listRv = token.rv;
      offset = token.offset;
    }
    const limit = q.limit ? Number(q.limit) : all.length;
    const page = all.slice(offset, offset + limit);
    const metadata: Record<string, string> = { resourceVersion: String(listRv) };
    if (offset + limit < all.length) metadata.continue = Buffer.from(JSON.stringify({ rv: listRv, offset: offset + limit })).toString('base64');
    // List items carry no kind/apiVersion: the list's kind says it.
    const items = page.map(({ kind: _k, apiVersion: _a, ...rest }) => rest);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kind: `${t.kind}List`, apiVersion: t.apiVersion, metadata, items }));
  }

  private serveWatch(resource: ResourceName, nameSelector: string | undefined, q: Record<string, string>, res: ServerResponse): void {
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
    const w: Watcher = { resource, nameSelector, res, bookmarks: q.allowWatchBookmarks === 'true' };
    if (from === undefined || from === '' || from === '0') {
      // "Any version": start with the current state as ADDED events.
      for (const o of this.objects.get(resource)!.values()) if (matches(nameSelector, o)) writeEvent(res, 'ADDED', o);
    } else {
      for (const ev of this.history.get(resource)!) {
        if (ev.rv > Number(from) && matches(nameSelector, ev.object)) writeEvent(res, ev.type, ev.object);
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

function matches(nameSelector: string | undefined, o: Obj): boolean {
  return nameSelector === undefined || o.metadata.name === nameSelector;
}

function writeEvent(res: ServerResponse, type: string, object: unknown): void {
  res.write(`${JSON.stringify({ type, object })}\n`);
}

function sendStatus(res: ServerResponse, code: number, reason: string, message: string): void {
  res.writeHead(code, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code }));
}
