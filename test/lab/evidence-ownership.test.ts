// Evidence ownership against the real kube-apiserver v1.20.2 and real RBAC (issue 36, finding 1):
// a tenant that may only `get` Services in its own namespace asks the agent's /evidence, through
// the relay's node-bound credentials as the relay sends them, about a Service of its own that
// shares an Ingress VIP with a victim's, or whose tenant-chosen LB hostname resolves to the
// victim's database ClusterIP. It gets its own connections only, never the victim's. The agent's
// HTTP server and evidence socket run in this process, wired as src/cli/agent.ts wires them.
import { mkdtempSync, rmSync } from 'node:fs';
import { request, type Server } from 'node:http';
import type { AddressInfo, Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConntrackTable } from '../../src/agent/conntrack-table.js';
import { evidenceAudience, evidenceRoute, ON_BEHALF_OF_HEADER } from '../../src/agent/evidence-http.js';
import { EvidenceAnswers, startEvidenceServer } from '../../src/agent/evidence-server.js';
import { KubeAuthorizer, ReviewRateLimiter } from '../../src/agent/kube-authorizer.js';
import { ServiceIndex } from '../../src/agent/service-index.js';
import { AccessReviewClient } from '../../src/cluster/access-review.js';
import { loadApiTarget } from '../../src/cluster/kube-config.js';
import { createMetricsServer } from '../../src/export/server.js';
import {
  entry,
  type Flow,
  ingress,
  MANAGED,
  NODE,
  NODE_IP,
  POD_CIDR,
  service,
  slice,
  viewOf,
} from '../support/evidence-objects.js';
import {
  type ControlPlane,
  serviceAccountToken,
  startControlPlane,
  tokenKubeconfig,
} from '../support/kube-control-plane.js';

const DEPLOY = join(import.meta.dirname, '../../deploy');
const RELAY_USER = 'system:serviceaccount:clbprobe:clbprobe-evidence-relay';
const TENANT = {
  username: 'system:serviceaccount:attacker:tenant-a',
  groups: ['system:serviceaccounts', 'system:serviceaccounts:attacker', 'system:authenticated'],
};
const SHARED_VIP = '203.0.113.80';
const DB_CLUSTER_IP = '10.96.0.54';

const objects = [
  service('victim', 'web', { type: 'NodePort', clusterIP: '10.96.0.10', port: 80, nodePort: 30081 }),
  slice('victim', 'web', MANAGED, ['10.244.1.50'], 80),
  ingress('victim', 'site', 'web', 80, SHARED_VIP),
  service('victim', 'db', { clusterIP: DB_CLUSTER_IP, port: 5432 }),
  slice('victim', 'db', MANAGED, ['10.244.1.54'], 5432),
  // (a) the tenant's Ingress to its own Service: the shared controller writes the same VIP.
  service('attacker', 'evil', { type: 'NodePort', clusterIP: '10.96.0.66', port: 80, nodePort: 30066 }),
  slice('attacker', 'evil', MANAGED, ['10.244.1.66'], 80),
  ingress('attacker', 'evil', 'evil', 80, SHARED_VIP),
  // (b) a tenant-chosen LB hostname at the database's port; the tenant's DNS answers the ClusterIP.
  service('attacker', 'evil-db', {
    type: 'LoadBalancer',
    clusterIP: '10.96.0.67',
    port: 5432,
    nodePort: 30067,
    annotations: { 'service.beta.kubernetes.io/do-loadbalancer-hostname': 'lb.evil.example' },
    status: [{ hostname: 'lb.evil.example' }],
  }),
  slice('attacker', 'evil-db', MANAGED, ['10.244.1.67'], 5432),
];

const flows: Flow[] = [
  // The victim pod's connections: to the shared Ingress VIP, and to its database.
  { id: 1, dst: SHARED_VIP, dport: 80 },
  { id: 2, dst: DB_CLUSTER_IP, dport: 5432, replySrc: '10.244.1.54', replySport: 5432 },
  // The L7 LB's leg into the tenant's NodePort, and a client of the tenant's own ClusterIP.
  { id: 3, src: '35.191.0.6', dst: NODE_IP, dport: 30066, replySrc: '10.244.1.66', replySport: 80 },
  { id: 4, dst: '10.96.0.66', dport: 80, replySrc: '10.244.1.66', replySport: 80 },
];

describe('evidence ownership with the real API server: a tenant gets its own connections only', () => {
  let cp: ControlPlane;
  let dir: string;
  let evidenceSocket: NetServer;
  let agentHttp: Server;
  let agentPort: number;
  let relayNodeToken: string;

  const saToken = (ns: string, name: string, audiences?: string[]): Promise<string> =>
    serviceAccountToken(cp, ns, name, audiences);

  /** The entry ids of the agent's /evidence answer for NS/NAME, asked as the relay asks for `user`. */
  const evidenceFor = (ref: string, user: object): Promise<{ status: number; ids: number[]; body: string }> =>
    new Promise((resolve, reject) => {
      const [ns, name] = ref.split('/');
      const headers = { authorization: `Bearer ${relayNodeToken}`, [ON_BEHALF_OF_HEADER]: JSON.stringify(user) };
      const req = request(
        { host: '127.0.0.1', port: agentPort, path: `/evidence?service=${ns}/${name}`, headers, agent: false },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (body += d));
          res.on('end', () => {
            const lines = body
              .split('\n')
              .filter(Boolean)
              .map((l) => JSON.parse(l) as { type: string; entry?: { id: number } });
            const ids = lines
              .filter((l) => l.type === 'entry')
              .map((l) => l.entry!.id)
              .sort((a, b) => a - b);
            resolve({ status: res.statusCode ?? 0, ids, body });
          });
        },
      );
      req.on('error', reject);
      req.end();
    });

  beforeAll(async () => {
    cp = await startControlPlane();
    dir = mkdtempSync(join(tmpdir(), 'cbo-rbac-'));
    cp.kubectl(['apply', '-f', join(DEPLOY, 'namespace.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'rbac.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'evidence-relay.yaml')]);
    for (const ns of ['victim', 'attacker']) cp.kubectl(['create', 'namespace', ns]);
    cp.kubectl(['create', 'serviceaccount', '-n', 'attacker', 'tenant-a']);
    cp.kubectl(['create', 'role', 'svc-reader', '-n', 'attacker', '--verb', 'get', '--resource', 'services']);
    cp.kubectl([
      'create',
      'rolebinding',
      'tenant-a',
      '-n',
      'attacker',
      '--role',
      'svc-reader',
      '--serviceaccount',
      'attacker:tenant-a',
    ]);

    const view = viewOf(objects, { 'lb.evil.example': [DB_CLUSTER_IP] });
    const index = new ServiceIndex(view, { nodeIps: [NODE_IP], ipvsIps: [], podCidrs: [POD_CIDR] });
    const table = new ConntrackTable(index);
    for (const f of flows) table.upsert(entry(f), 1000 + f.id);
    const socketPath = join(dir, 'evidence.sock');
    const answers = new EvidenceAnswers({
      table: () => table,
      find: (n, m, p) => index.find(n, m, p),
      nodeName: NODE,
    });
    evidenceSocket = await startEvidenceServer(socketPath, answers);

    const agentToken = await saToken('clbprobe', 'clbprobe');
    const kubeconfig = tokenKubeconfig(cp, join(dir, 'kubeconfig'), agentToken);
    const authz = new KubeAuthorizer(new AccessReviewClient(loadApiTarget(kubeconfig)), {
      limiter: new ReviewRateLimiter(),
      audiences: [evidenceAudience(NODE)],
    });
    agentHttp = createMetricsServer({
      registry: new Registry(),
      ready: () => true,
      routes: {
        '/evidence': evidenceRoute(
          {
            authenticate: (a, source) => authz.authenticate(a, source),
            authorize: (u, attrs, by) => authz.authorize(u, attrs, by),
            relayUser: RELAY_USER,
          },
          () => answers,
        ),
      },
    });
    await new Promise<void>((r) => agentHttp.listen(0, '127.0.0.1', r));
    agentPort = (agentHttp.address() as AddressInfo).port;
    relayNodeToken = await saToken('clbprobe', 'clbprobe-evidence-relay', [evidenceAudience(NODE)]);
  }, 180_000);

  afterAll(async () => {
    agentHttp?.closeAllConnections();
    agentHttp?.close();
    evidenceSocket?.close();
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("is refused the victim's Service", async () => {
    const r = await evidenceFor('victim/web', TENANT);
    expect(r.status, r.body).toBe(403);
    expect(r.ids).toEqual([]);
  });

  it("(a) gets its own Service's legs through the shared Ingress VIP, not the victim's connection to it", async () => {
    const r = await evidenceFor('attacker/evil', TENANT);
    expect(r.status, r.body).toBe(200);
    expect(r.ids).toEqual([3, 4]);
  });

  it("(b) gets nothing of the victim's database connection through a hostname it chose", async () => {
    const r = await evidenceFor('attacker/evil-db', TENANT);
    expect(r.status, r.body).toBe(200);
    expect(r.ids).not.toContain(2);
  });
});
