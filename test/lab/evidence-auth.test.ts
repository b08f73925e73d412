// Token reviews, evidence fairness and the relay's credentials (issue 36, findings 3, 4 and 5),
// against the real kube-apiserver v1.20.2 (test/support/kube-control-plane.ts) with deploy/rbac.yaml
// and deploy/evidence-relay.yaml applied as shipped. The agent's HTTP server (/metrics and
// /evidence with its evidence socket) and the relay's server run in this process on loopback, as
// src/cli/agent.ts and src/cli/evidence-relay.ts wire them, each with its service account's real
// JWT from the TokenRequest API; tenants and on-call are service accounts with real RBAC.
import { mkdtempSync, rmSync } from 'node:fs';
import { type IncomingHttpHeaders, request, type Server } from 'node:http';
import { type AddressInfo, createConnection, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConntrackTable } from '../../src/agent/conntrack-table.js';
import {
  type EvidenceAccess,
  evidenceAudience,
  evidenceRoute,
  ON_BEHALF_OF_HEADER,
} from '../../src/agent/evidence-http.js';
import { EvidenceAnswers, startEvidenceServer } from '../../src/agent/evidence-server.js';
import { KubeAuthorizer, ReviewRateLimiter } from '../../src/agent/kube-authorizer.js';
import { ServiceIndex } from '../../src/agent/service-index.js';
import { relayServer } from '../../src/cli/evidence-relay.js';
import { AccessReviewClient } from '../../src/cluster/access-review.js';
import { buildClusterView } from '../../src/cluster/build.js';
import { classifyDocuments } from '../../src/cluster/file.js';
import { loadApiTarget } from '../../src/cluster/kube-config.js';
import { clusterList, LAB } from '../../src/demo/lab.js';
import { createMetricsServer } from '../../src/export/server.js';
import { NodeTokens, tokenRequester } from '../../src/remote/node-tokens.js';
import { relayRoute, TOKEN_HEADER } from '../../src/remote/relay.js';
import {
  type ControlPlane,
  serviceAccountToken,
  startControlPlane,
  tokenKubeconfig,
} from '../support/kube-control-plane.js';

const DEPLOY = join(import.meta.dirname, '../../deploy');
const NODE = LAB.node1Name;
const RELAY_USER = 'system:serviceaccount:clbprobe:clbprobe-evidence-relay';

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** One GET; with `firstLine`, resolves at the first body line and leaves the request open (a watch). */
function get(
  port: number,
  path: string,
  headers: Record<string, string> = {},
  opts: { localAddress?: string; firstLine?: boolean } = {},
): Promise<Answer & { close: () => void }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        headers,
        agent: false,
        ...(opts.localAddress ? { localAddress: opts.localAddress } : {}),
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        const close = (): void => void req.destroy();
        const answer = () => ({ status: res.statusCode ?? 0, headers: res.headers, body, close });
        res.on('data', (d: string) => {
          body += d;
          if (opts.firstLine && body.includes('\n')) resolve(answer());
        });
        res.on('end', () => resolve(answer()));
        res.on('error', reject);
      },
    );
    req.setTimeout(20_000, () => req.destroy(new Error(`GET ${path}: no answer in 20 s`)));
    req.on('error', reject);
    req.end();
  });
}

let nextAddress = 0;
/** A loopback address no other request of the test used: each caller its own source, as pods have. */
const ownSource = (): { localAddress: string } => ({ localAddress: `127.2.0.${++nextAddress}` });

const firstLine = (a: Answer): { type?: string; message?: string } =>
  JSON.parse(a.body.split('\n')[0] ?? '{}') as { type?: string };

describe('token reviews, fair evidence and the relay, against the real kube-apiserver v1.20.2', () => {
  let cp: ControlPlane;
  let dir: string;
  let evidenceSocket: NetServer;
  let agentHttp: Server;
  let relayHttp: Server;
  let agentPort: number;
  let relayPort: number;
  let metricsAuthz: KubeAuthorizer;
  const seenByAgent: IncomingHttpHeaders[] = [];
  const tokens: Record<string, string> = {};

  const saToken = (ns: string, name: string, audiences?: string[]): Promise<string> =>
    serviceAccountToken(cp, ns, name, audiences);
  const kubeconfigFor = (name: string, token: string): string =>
    tokenKubeconfig(cp, join(dir, `kubeconfig-${name}`), token);
  /** Whether the API server takes `token` for `audience` (undefined: its own). */
  const reviewAs = async (token: string, audience?: string): Promise<boolean> => {
    const r = await cp.request('POST', '/apis/authentication.k8s.io/v1/tokenreviews', {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenReview',
      spec: { token, ...(audience ? { audiences: [audience] } : {}) },
    });
    return (r.body as { status: { authenticated?: boolean } }).status.authenticated === true;
  };
  const agentReviews = (): number =>
    cp
      .audit()
      .filter(
        (e) =>
          e.user.username === 'system:serviceaccount:clbprobe:clbprobe' &&
          e.requestURI.startsWith('/apis/authentication.k8s.io/v1/tokenreviews'),
      ).length;
  const viaRelay = (token: string | undefined, query: string, firstLineOnly = false) =>
    get(relayPort, `/evidence?${query}`, token ? { [TOKEN_HEADER]: `Bearer ${token}` } : {}, {
      firstLine: firstLineOnly,
    });

  beforeAll(async () => {
    cp = await startControlPlane();
    dir = mkdtempSync(join(tmpdir(), 'cba-auth-'));
    cp.kubectl(['apply', '-f', join(DEPLOY, 'namespace.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'rbac.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'evidence-relay.yaml')]);
    cp.kubectl(['apply', '-f', join(DEPLOY, 'flowschema.yaml')]);
    for (const ns of ['lab', 'ops', 'monitoring']) cp.kubectl(['create', 'namespace', ns]);
    for (const [ns, sa] of [
      ['lab', 'tenant'],
      ['ops', 'sre'],
      ['monitoring', 'prometheus'],
    ])
      cp.kubectl(['create', 'serviceaccount', '-n', ns!, sa!]);
    cp.kubectl([
      'create',
      'role',
      'web-reader',
      '-n',
      'lab',
      '--verb',
      'get',
      '--resource',
      'services',
      '--resource-name',
      'web',
    ]);
    cp.kubectl([
      'create',
      'rolebinding',
      'tenant',
      '-n',
      'lab',
      '--role',
      'web-reader',
      '--serviceaccount',
      'lab:tenant',
    ]);
    cp.kubectl(['create', 'rolebinding', 'sre', '-n', 'lab', '--role', 'web-reader', '--serviceaccount', 'ops:sre']);
    cp.kubectl([
      'create',
      'clusterrolebinding',
      'prometheus',
      '--clusterrole',
      'clbprobe-metrics-reader',
      '--serviceaccount',
      'monitoring:prometheus',
    ]);
    tokens.tenant = await saToken('lab', 'tenant');
    tokens.sre = await saToken('ops', 'sre');
    tokens.prometheus = await saToken('monitoring', 'prometheus');

    // The agent: its evidence socket over the lab's view, its HTTP server as src/cli/agent.ts wires it.
    const { objects } = classifyDocuments([clusterList('Local')]);
    const view = buildClusterView(objects, { nodeName: NODE });
    const table = new ConntrackTable(
      new ServiceIndex(view, { nodeIps: [LAB.node1], ipvsIps: [], podCidrs: [LAB.podCidr] }),
    );
    const socketPath = join(dir, 'evidence.sock');
    const answers = new EvidenceAnswers({
      table: () => table,
      find: (ns, name, port) =>
        view.services.filter((s) => s.namespace === ns && s.name === name && (port === undefined || s.port === port)),
      nodeName: NODE,
    });
    evidenceSocket = await startEvidenceServer(socketPath, answers);
    const agentApi = new AccessReviewClient(
      loadApiTarget(kubeconfigFor('agent', await saToken('clbprobe', 'clbprobe'))),
    );
    const limiter = new ReviewRateLimiter();
    metricsAuthz = new KubeAuthorizer(agentApi, { limiter });
    const evidenceAuthz = new KubeAuthorizer(agentApi, { limiter, audiences: [evidenceAudience(NODE)] });
    const access: EvidenceAccess = {
      authenticate: (a, source) => evidenceAuthz.authenticate(a, source),
      authorize: (u, attrs, by) => evidenceAuthz.authorize(u, attrs, by),
      relayUser: RELAY_USER,
    };
    agentHttp = createMetricsServer({
      registry: new Registry(),
      ready: () => true,
      authorize: (req) =>
        metricsAuthz.check(
          req.headers.authorization,
          { nonResource: { path: '/metrics', verb: 'get' } },
          req.socket.remoteAddress,
        ),
      routes: { '/evidence': evidenceRoute(access, () => answers) },
    });
    agentHttp.prependListener('request', (req) => seenByAgent.push(req.headers));
    await new Promise<void>((r) => agentHttp.listen(0, '127.0.0.1', r));
    agentPort = (agentHttp.address() as AddressInfo).port;

    // The relay, as src/cli/evidence-relay.ts wires it, with its service account's credentials.
    const relayTarget = loadApiTarget(kubeconfigFor('relay', await saToken('clbprobe', 'clbprobe-evidence-relay')));
    const relayAuthz = new KubeAuthorizer(new AccessReviewClient(relayTarget), {
      limiter: new ReviewRateLimiter({ perSecond: 5, burst: 20 }, { perSecond: 20, burst: 50 }),
    });
    const nodeTokens = new NodeTokens(
      tokenRequester(relayTarget, { namespace: 'clbprobe', name: 'clbprobe-evidence-relay' }),
    );
    relayHttp = relayServer(
      relayRoute({
        check: (a, attrs, source) => relayAuthz.check(a, attrs, source),
        listPods: async () => [
          {
            name: 'clbprobe-a',
            node: NODE,
            phase: 'Running',
            ready: true,
            containers: ['agent'],
            deleting: false,
            ip: '127.0.0.1',
          },
        ],
        container: 'agent',
        agentPort,
        concurrency: 4,
        maxRequests: 16,
        maxRequestsPerCaller: 2,
        nodeToken: (node) => nodeTokens.forNode(node),
      }),
    );
    await new Promise<void>((r) => relayHttp.listen(0, '127.0.0.1', r));
    relayPort = (relayHttp.address() as AddressInfo).port;
  }, 180_000);

  afterAll(async () => {
    relayHttp?.closeAllConnections();
    relayHttp?.close();
    agentHttp?.closeAllConnections();
    agentHttp?.close();
    evidenceSocket?.close();
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('finding 5: the relay never sends the on-call token to a node; what a node gets is good on that node only', async () => {
    seenByAgent.length = 0;
    const r = await viaRelay(tokens.sre!, 'service=lab/web');
    expect(r.status, r.body).toBe(200);
    expect(
      r.body
        .split('\n')
        .filter(Boolean)
        .map((l) => (JSON.parse(l) as { type: string }).type),
    ).toEqual(['service', 'end', 'summary']);
    expect(seenByAgent).toHaveLength(1);
    const sent = /^Bearer (\S+)$/.exec(seenByAgent[0]!.authorization ?? '')?.[1] ?? '';
    expect(sent).not.toBe(tokens.sre);
    expect(JSON.stringify(seenByAgent[0])).not.toContain(tokens.sre);
    expect(JSON.parse(String(seenByAgent[0]![ON_BEHALF_OF_HEADER]))).toMatchObject({
      username: 'system:serviceaccount:ops:sre',
    });
    // A node that keeps it can use it nowhere else: not against the API server, not on another node.
    expect(await reviewAs(sent, evidenceAudience(NODE))).toBe(true);
    expect(await reviewAs(sent)).toBe(false);
    expect(await reviewAs(sent, evidenceAudience('node-other'))).toBe(false);
    const asApi = await get(cp.port, '/api/v1/namespaces/lab/services', { authorization: `Bearer ${sent}` }).catch(
      () => undefined,
    );
    expect(asApi?.status ?? 401).not.toBe(200);
  }, 60_000);

  it('finding 5: the agent takes no full API credential, and only the relay may name a user, whose own access decides', async () => {
    // The tenant's ordinary token, allowed lab/web: refused for lacking this node's audience.
    const plain = await get(
      agentPort,
      '/evidence?service=lab/web',
      { authorization: `Bearer ${tokens.tenant}` },
      ownSource(),
    );
    expect(plain.status, plain.body).toBe(401);
    const forNode = await saToken('lab', 'tenant', [evidenceAudience(NODE)]);
    expect(
      (await get(agentPort, '/evidence?service=lab/web', { authorization: `Bearer ${forNode}` }, ownSource())).status,
    ).toBe(200);
    expect(
      (
        await get(
          agentPort,
          '/evidence?service=lab/web',
          { authorization: `Bearer ${await saToken('lab', 'tenant', [evidenceAudience('node-other')])}` },
          ownSource(),
        )
      ).status,
    ).toBe(401);
    const claims = await get(
      agentPort,
      '/evidence?service=lab/web',
      {
        authorization: `Bearer ${forNode}`,
        [ON_BEHALF_OF_HEADER]: JSON.stringify({ username: 'admin', groups: ['system:masters'] }),
      },
      ownSource(),
    );
    expect(claims.status, claims.body).toBe(403);
    const relayToken = await saToken('clbprobe', 'clbprobe-evidence-relay', [evidenceAudience(NODE)]);
    const named = (user: object) =>
      get(
        agentPort,
        '/evidence?service=lab/web',
        { authorization: `Bearer ${relayToken}`, [ON_BEHALF_OF_HEADER]: JSON.stringify(user) },
        ownSource(),
      );
    expect(
      (
        await named({
          username: 'system:serviceaccount:ops:sre',
          groups: ['system:serviceaccounts', 'system:serviceaccounts:ops', 'system:authenticated'],
        })
      ).status,
    ).toBe(200);
    expect((await named({ username: 'someone', groups: ['system:authenticated'] })).status).toBe(403);
    expect(
      (await get(agentPort, '/evidence?service=lab/web', { authorization: `Bearer ${relayToken}` }, ownSource()))
        .status,
    ).toBe(400);
  }, 60_000);

  it('finding 4: a tenant flooding watches through the relay holds two; on-call gets its watch', async () => {
    const held: Array<Answer & { close: () => void }> = [];
    try {
      const flood = await Promise.all(
        Array.from({ length: 20 }, () => viaRelay(tokens.tenant!, 'service=lab/web&watch=60', true)),
      );
      held.push(...flood);
      const statuses = flood.map((a) => a.status).sort();
      expect(statuses.filter((s) => s === 200)).toHaveLength(2);
      expect(statuses.filter((s) => s === 429)).toHaveLength(18);
      const sre = await viaRelay(tokens.sre!, 'service=lab/web&watch=60', true);
      held.push(sre);
      expect(sre.status, sre.body).toBe(200);
      expect(firstLine(sre)).toMatchObject({ type: 'service' });
    } finally {
      for (const a of held) a.close();
    }
  }, 60_000);

  it('finding 4: no token, no connection held; 300 idle sockets do not lock on-call out', async () => {
    const noToken = await viaRelay(undefined, 'service=lab/web');
    expect(noToken.status).toBe(401);
    expect(noToken.headers.connection).toBe('close');
    const idle: Socket[] = [];
    try {
      for (let i = 0; i < 300; i++) {
        const s = createConnection({ host: '127.0.0.1', port: relayPort });
        s.on('error', () => undefined);
        idle.push(s);
      }
      await new Promise<void>((r) => setTimeout(r, 300));
      const sre = await viaRelay(tokens.sre!, 'service=lab/web');
      expect(sre.status, sre.body).toBe(200);
      expect(firstLine(sre)).toMatchObject({ type: 'service' });
    } finally {
      for (const s of idle) s.destroy();
    }
  }, 60_000);

  it("finding 3: 1,100 garbage tokens cost a handful of TokenReviews and never push out Prometheus' answer", async () => {
    const scrape = () =>
      get(agentPort, '/metrics', { authorization: `Bearer ${tokens.prometheus}` }, { localAddress: '127.1.0.9' });
    expect((await scrape()).status).toBe(200);
    const before = agentReviews();
    const t0 = Date.now();
    const answers: number[] = [];
    // One pod's flood from one address, then from 50 addresses (the global rate).
    for (let batch = 0; batch < 22; batch++) {
      const from = batch < 11 ? '127.0.0.1' : undefined;
      const rs = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          get(
            agentPort,
            '/metrics',
            { authorization: `Bearer garbage-${batch}-${i}` },
            { localAddress: from ?? `127.0.${batch}.${i + 2}` },
          ).then((a) => a.status),
        ),
      );
      answers.push(...rs);
      // Prometheus' scrape in the middle of the flood: answered from its cache, at once.
      const s = await scrape();
      expect(s.status, s.body).toBe(200);
    }
    const seconds = (Date.now() - t0) / 1000;
    const sent = agentReviews() - before;
    // Bursts (10 per address, 40 in all) plus the global 5/s for the flood's duration.
    expect(sent).toBeLessThanOrEqual(40 + Math.ceil(seconds * 5) + 5);
    expect(answers.filter((s) => s === 429).length).toBeGreaterThan(1000);
    expect(answers.filter((s) => s !== 429 && s !== 401)).toEqual([]);
    const afterFlood = agentReviews();
    expect((await scrape()).status).toBe(200);
    expect(agentReviews()).toBe(afterFlood);
    console.log(
      `finding 3: 1,100 garbage tokens in ${seconds.toFixed(1)} s -> ${sent} TokenReviews, ${answers.filter((s) => s === 429).length} refused with 429`,
    );
  }, 120_000);
});
