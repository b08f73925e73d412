// The cluster's answer against a real kube-apiserver v1.20.2 (test/support/kube-control-plane.ts).
// `clbprobe status`: the compiled CLI, the relay's /status and five agents' /findings (each an
// agent HTTP server as src/cli/agent.ts wires it, in this process on its own loopback address, with
// the findings the detectors give for a fixture case), every token review, access review,
// TokenRequest and pod list done by the real API server under deploy/*.yaml's RBAC as shipped.
// The real API server will not proxy to a loopback endpoint and the test may not give the root
// namespace another address, so the hop from the CLI to the relay is a loopback server here that
// does what the service proxy does: a TokenReview of the caller, a SubjectAccessReview of "get"
// services/proxy on the relay's Service, the Authorization header dropped, the request forwarded.
// The fix as a command: every fixture case is diagnosed, its Services are created in the API server
// as the fixture's cluster.json has them, and each fix's printed command is run by a shell with
// `--dry-run=server`: the API server must accept the patch and the object it returns must carry
// the change. Every remedy kind must be met at least once (each field exists in 1.20).
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EvidenceAccess, evidenceAudience, evidenceRoute } from '../../src/agent/evidence-http.js';
import { findingsRoute } from '../../src/agent/findings-http.js';
import { KubeAuthorizer, ReviewRateLimiter } from '../../src/agent/kube-authorizer.js';
import { relayServer } from '../../src/cli/evidence-relay.js';
import { AccessReviewClient } from '../../src/cluster/access-review.js';
import { KubeApi } from '../../src/cluster/kube-api.js';
import type { ApiTarget } from '../../src/cluster/kube-config.js';
import { loadApiTarget } from '../../src/cluster/kube-config.js';
import { type FixChange, type FixKind, withCommand } from '../../src/detect/fixes.js';
import { diagnose } from '../../src/detect/index.js';
import { renderFixCommands } from '../../src/detect/render.js';
import type { Finding } from '../../src/detect/types.js';
import { createMetricsServer } from '../../src/export/server.js';
import { readAgentPods } from '../../src/remote/agent-pods.js';
import { EVENT_REASON, EVENT_REASON_CLEARED, EventRecorder, eventCreator } from '../../src/remote/events.js';
import { NodeTokens, tokenRequester } from '../../src/remote/node-tokens.js';
import { relayRoute } from '../../src/remote/relay.js';
import { statusRoute } from '../../src/remote/status.js';
import { CHROMIUM, openPage } from '../support/chromium.js';
import {
  binary,
  type ControlPlane,
  serviceAccountToken,
  startControlPlane,
  tokenKubeconfig,
} from '../support/kube-control-plane.js';
import { isRoot } from '../support/netns.js';
import { CLI, requireBuiltCli } from '../support/run-cli.js';
import { BUNDLES, loadCase } from '../unit/detect/fixture-bundle.js';

type Obj = Record<string, any>;

const KINDS: FixKind[] = [
  'etp-cluster',
  'tencent-prevent-loopback',
  'aws-preserve-client-ip-off',
  'source-ranges-add-pods',
];

/** The fixture's Service as a user would create it: no server-owned fields, no addresses this API server would refuse. */
function creatable(svc: Obj): Obj {
  const { uid, resourceVersion, creationTimestamp, managedFields, ...metadata } = svc.metadata;
  const { clusterIP, clusterIPs, healthCheckNodePort, ...spec } = svc.spec;
  spec.ports = spec.ports.map(({ nodePort, ...p }: Obj) => p);
  return { apiVersion: 'v1', kind: 'Service', metadata, spec };
}

/** What the patched object must show for each kind. */
function changed(fix: FixChange, obj: Obj): boolean {
  switch (fix.kind) {
    case 'etp-cluster':
      return obj.spec.externalTrafficPolicy === 'Cluster';
    case 'tencent-prevent-loopback':
      return obj.metadata.annotations?.['service.cloud.tencent.com/prevent-loopback'] === 'true';
    case 'aws-preserve-client-ip-off':
      return /(^|,)preserve_client_ip\.enabled=false$/.test(
        obj.metadata.annotations?.['service.beta.kubernetes.io/aws-load-balancer-target-group-attributes'] ?? '',
      );
    case 'source-ranges-add-pods':
      return (
        fix.patch.type === 'json' &&
        fix.patch.body.every((op) => (obj.spec.loadBalancerSourceRanges ?? []).includes(op.value))
      );
  }
}

describe.skipIf(!isRoot)('fix commands against a real kube-apiserver v1.20.2', () => {
  let cp: ControlPlane;
  beforeAll(async () => {
    cp = await startControlPlane();
  }, 120_000);
  afterAll(async () => {
    await cp?.stop();
  });

  it('every remedy kind prints a command the API server accepts, and the object it returns has the change', async () => {
    const seen = new Set<FixKind>();
    const cases = readdirSync(BUNDLES, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name)
      .sort();
    const kubeconfig = cp.kubeconfig('admin');
    const path = `${dirname(binary('kubectl'))}:${process.env.PATH ?? ''}`;
    for (const name of cases) {
      const { input } = loadCase(name);
      const findings = diagnose(input).findings;
      const fixes = findings.flatMap((f) => (f.fixes ?? []).map(withCommand));
      if (fixes.length === 0) continue;
      const printed = renderFixCommands(findings);
      const cluster = JSON.parse(readFileSync(join(BUNDLES, name, 'cluster.json'), 'utf8')) as { items: Obj[] };
      const services = cluster.items.filter((o) => o.kind === 'Service');
      for (const ns of new Set(services.map((s) => s.metadata.namespace as string))) {
        if ((await cp.request('GET', `/api/v1/namespaces/${ns}`)).status === 404)
          await cp.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
      }
      try {
        for (const s of services) await cp.create(`/api/v1/namespaces/${s.metadata.namespace}/services`, creatable(s));
        for (const fix of fixes) {
          expect(printed, name).toContain(fix.command);
          expect(fix.effect.length, fix.command).toBeGreaterThan(40);
          const r = spawnSync('sh', ['-c', `${fix.command} --dry-run=server -o json`], {
            encoding: 'utf8',
            env: { ...process.env, PATH: path, KUBECONFIG: kubeconfig },
            timeout: 60_000,
          });
          expect(r.status, `${name}: ${fix.command}\n${r.stderr}`).toBe(0);
          const obj = JSON.parse(r.stdout) as Obj;
          expect([obj.metadata.namespace, obj.metadata.name]).toEqual([fix.object.namespace, fix.object.name]);
          expect(changed(fix, obj), `${name}: ${fix.command}\n${r.stdout}`).toBe(true);
          seen.add(fix.kind);
        }
        // A dry run changes nothing: clbprobe's commands are for the owner to run.
        for (const fix of fixes) {
          const live = (
            await cp.request('GET', `/api/v1/namespaces/${fix.object.namespace}/services/${fix.object.name}`)
          ).body as Obj;
          expect(changed(fix, live), fix.command).toBe(false);
        }
      } finally {
        for (const s of services)
          await cp.request('DELETE', `/api/v1/namespaces/${s.metadata.namespace}/services/${s.metadata.name}`);
      }
    }
    expect([...seen].sort()).toEqual([...KINDS].sort());
  }, 180_000);
});

/** The active and risk findings the detectors give for a fixture case: what an agent holds. */
const significant = (name: string): Finding[] =>
  diagnose(loadCase(name).input).findings.filter((f) => f.severity !== 'info');
const PLUGIN = join(import.meta.dirname, '../../bin/kubectl-clbprobe');
const DEPLOY = join(import.meta.dirname, '../../deploy');
const RELAY_USER = 'system:serviceaccount:clbprobe:clbprobe-evidence-relay';
const AGENT_LABELS = { 'app.kubernetes.io/name': 'clbprobe' };

/** Each node: its fixture case (the findings its agent holds), or how it fails to answer. */
const NODES: { node: string; ip: string; case?: string; old?: boolean; pending?: boolean }[] = [
  { node: 'node-a', ip: '127.3.0.1', case: 'tke-ipvs-unbound-l4-loop' },
  { node: 'node-b', ip: '127.3.0.2', case: 'tke-ipvs-unbound-config-only' },
  { node: 'node-c', ip: '127.3.0.3', case: 'iptables-1.29-source-ranges' },
  // Its pod runs, nothing listens at its IP.
  { node: 'node-d', ip: '127.3.0.4' },
  // An agent from before /findings: /evidence only.
  { node: 'node-e', ip: '127.3.0.5', old: true },
  { node: 'node-f', ip: '127.3.0.6', pending: true },
];

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The compiled CLI, not blocking this process (the agents, relay and proxy answer from it). */
function cli(argv: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  const p = spawn(argv[0]!, argv.slice(1), {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1', ...env },
  });
  const r: Run = { code: null, stdout: '', stderr: '' };
  p.stdout!.on('data', (b: Buffer) => (r.stdout += b.toString()));
  p.stderr!.on('data', (b: Buffer) => (r.stderr += b.toString()));
  return new Promise((resolve) => p.on('close', (code) => resolve({ ...r, code })));
}

describe.skipIf(!isRoot)('clbprobe status: five agents and the relay against a real kube-apiserver v1.20.2', () => {
  let cp: ControlPlane;
  let dir: string;
  const servers: Server[] = [];
  const kubeconfigs: Record<string, string> = {};
  let proxyPort = 0;
  /** What each agent holds now: the Events test changes it between rounds. */
  const held: Record<string, Finding[]> = {};
  /** Agents that answer 503 (before their first sync) while listed here. */
  const syncing = new Set<string>();
  let relayTarget: ApiTarget;
  let ask: Omit<ConstructorParameters<typeof EventRecorder>[0], 'create' | 'quietPeriodMs' | 'perMinute' | 'burst'>;

  const listen = (server: Server, host: string, port = 0): Promise<number> =>
    new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve((server.address() as AddressInfo).port));
      servers.push(server);
    });
  const saToken = (ns: string, name: string): Promise<string> => serviceAccountToken(cp, ns, name);
  const kubeconfigFor = (name: string, token: string, server: string): string =>
    tokenKubeconfig(cp, join(dir, `kubeconfig-${name}`), token, server);

  beforeAll(async () => {
    requireBuiltCli();
    cp = await startControlPlane();
    dir = mkdtempSync(join(tmpdir(), 'cbs-status-'));
    cp.kubectl(['apply', '-f', join(DEPLOY, 'namespace.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'rbac.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'evidence-relay.yaml')]);
    cp.kubectl(['apply', '-f', join(DEPLOY, 'oncall-rbac.yaml')]);
    // sre: on call, may get every Service in shop; tenant: on call, may get shop/admin only; dev: no on-call role.
    for (const ns of ['shop', 'ops'])
      if ((await cp.request('GET', `/api/v1/namespaces/${ns}`)).status === 404) cp.kubectl(['create', 'namespace', ns]);
    for (const sa of ['sre', 'tenant', 'dev']) cp.kubectl(['create', 'serviceaccount', '-n', 'ops', sa]);
    cp.kubectl(['create', 'role', 'svc-reader', '-n', 'shop', '--verb', 'get', '--resource', 'services']);
    cp.kubectl([
      'create',
      'role',
      'admin-reader',
      '-n',
      'shop',
      '--verb',
      'get',
      '--resource',
      'services',
      '--resource-name',
      'admin',
    ]);
    cp.kubectl(['create', 'rolebinding', 'sre', '-n', 'shop', '--role', 'svc-reader', '--serviceaccount', 'ops:sre']);
    cp.kubectl([
      'create',
      'rolebinding',
      'tenant',
      '-n',
      'shop',
      '--role',
      'admin-reader',
      '--serviceaccount',
      'ops:tenant',
    ]);
    cp.kubectl(['create', 'rolebinding', 'dev', '-n', 'shop', '--role', 'svc-reader', '--serviceaccount', 'ops:dev']);
    for (const sa of ['sre', 'tenant'])
      cp.kubectl([
        'create',
        'rolebinding',
        `oncall-${sa}`,
        '-n',
        'clbprobe',
        '--role',
        'clbprobe-oncall',
        '--serviceaccount',
        `ops:${sa}`,
      ]);

    // The agents: each with the agent service account's reviews for its own node's audience.
    const agentTarget = loadApiTarget(kubeconfigFor('agent', await saToken('clbprobe', 'clbprobe'), cp.server));
    const limiter = new ReviewRateLimiter();
    let agentPort = 0;
    for (const n of NODES) {
      if (!n.case && !n.old) continue;
      const authz = new KubeAuthorizer(new AccessReviewClient(agentTarget), {
        limiter,
        audiences: [evidenceAudience(n.node)],
      });
      const access: EvidenceAccess = {
        authenticate: (a, s) => authz.authenticate(a, s),
        authorize: (u, at, by) => authz.authorize(u, at, by),
        relayUser: RELAY_USER,
      };
      held[n.node] = n.case ? significant(n.case) : [];
      const routes: Record<string, ReturnType<typeof evidenceRoute>> = {
        '/evidence': evidenceRoute(access, () => undefined),
      };
      if (!n.old)
        routes['/findings'] = findingsRoute(access, () => ({
          ready: !syncing.has(n.node),
          nodeName: n.node,
          version: 'test',
          findings: held[n.node]!,
        }));
      agentPort = await listen(
        createMetricsServer({ registry: new Registry(), ready: () => true, routes }),
        n.ip,
        agentPort,
      );
    }
    // The agent pods, as the API server lists them to the relay.
    for (const n of NODES) {
      const name = `clbprobe-${n.node}`;
      await cp.create('/api/v1/namespaces/clbprobe/pods', {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, labels: AGENT_LABELS },
        spec: {
          nodeName: n.node,
          serviceAccountName: 'clbprobe',
          automountServiceAccountToken: false,
          containers: [{ name: 'agent', image: 'clbprobe:0.1.0' }],
        },
      });
      if (n.pending) continue;
      const pod = (await cp.request('GET', `/api/v1/namespaces/clbprobe/pods/${name}`)).body as Record<string, any>;
      pod.status = {
        phase: 'Running',
        podIP: n.ip,
        podIPs: [{ ip: n.ip }],
        containerStatuses: [
          { name: 'agent', ready: true, restartCount: 0, image: 'clbprobe:0.1.0', imageID: '', state: { running: {} } },
        ],
      };
      const r = await cp.request('PUT', `/api/v1/namespaces/clbprobe/pods/${name}/status`, pod);
      if (r.status !== 200) throw new Error(`pod ${name} status: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
    }

    // The relay, as src/cli/evidence-relay.ts wires it, with its service account.
    relayTarget = loadApiTarget(
      kubeconfigFor('relay', await saToken('clbprobe', 'clbprobe-evidence-relay'), cp.server),
    );
    const relayAuthz = new KubeAuthorizer(new AccessReviewClient(relayTarget), {
      limiter: new ReviewRateLimiter({ perSecond: 5, burst: 20 }, { perSecond: 20, burst: 50 }),
    });
    const nodeTokens = new NodeTokens(
      tokenRequester(relayTarget, { namespace: 'clbprobe', name: 'clbprobe-evidence-relay' }),
    );
    const api = new KubeApi(relayTarget);
    const common = {
      listPods: () => readAgentPods(api, 'clbprobe', 'app.kubernetes.io/name=clbprobe', 'agent'),
      container: 'agent',
      agentPort,
      concurrency: 3,
      maxRequests: 16,
      maxRequestsPerCaller: 2,
      nodeToken: (node: string) => nodeTokens.forNode(node),
    };
    ask = { ...common, agentTimeoutMs: 5000, maxAnswerBytes: 16 << 20 };
    const relayPort = await listen(
      relayServer(
        relayRoute({ ...common, check: (a, attrs, source) => relayAuthz.check(a, attrs, source) }),
        statusRoute({
          ...common,
          authenticate: (a, source) => relayAuthz.authenticate(a, source),
          agentTimeoutMs: 5000,
          maxAnswerBytes: 16 << 20,
        }),
      ),
      '127.0.0.1',
    );

    // The service proxy's steps, by the real API server: who the caller is, and "get" services/proxy on the relay.
    const proxyAuthz = new KubeAuthorizer(new AccessReviewClient(loadApiTarget(cp.kubeconfig('admin'))), {
      limiter: new ReviewRateLimiter({ perSecond: 50, burst: 100 }, { perSecond: 50, burst: 100 }),
    });
    const proxy = createServer((req, res) => {
      const m = /^\/api\/v1\/namespaces\/clbprobe\/services\/clbprobe-evidence\/proxy(\/.*)$/.exec(req.url ?? '');
      if (!m) return void res.writeHead(404).end();
      const attrs = {
        resource: {
          verb: 'get',
          group: '',
          resource: 'services',
          subresource: 'proxy',
          namespace: 'clbprobe',
          name: 'clbprobe-evidence',
        },
      };
      void proxyAuthz.check(req.headers.authorization, attrs, req.socket.remoteAddress).then((d) => {
        if (!d.ok)
          return void res
            .writeHead(d.status, { 'Content-Type': 'application/json' })
            .end(JSON.stringify({ kind: 'Status', message: d.message }));
        const { authorization: _a, host: _h, ...headers } = req.headers;
        const fwd = request({ host: '127.0.0.1', port: relayPort, path: m[1], headers }, (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        });
        fwd.on('error', () => res.destroy());
        fwd.end();
      });
    });
    proxyPort = await listen(proxy, '127.0.0.1');
    for (const sa of ['sre', 'tenant', 'dev'])
      kubeconfigs[sa] = kubeconfigFor(sa, await saToken('ops', sa), `http://127.0.0.1:${proxyPort}`);
  }, 180_000);

  afterAll(async () => {
    for (const s of servers) {
      s.closeAllConnections();
      s.close();
    }
    for (const n of NODES)
      await cp?.request('DELETE', `/api/v1/namespaces/clbprobe/pods/clbprobe-${n.node}?gracePeriodSeconds=0`);
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const status = (user: string, ...args: string[]) =>
    cli([process.execPath, CLI, 'status', '--kubeconfig', kubeconfigs[user]!, ...args]);

  it('one table for the cluster: the looping Service with its nodes, the agents that did not answer listed, exit 1', async () => {
    const r = await status('sre');
    expect(r.code, r.stderr).toBe(1);
    const lines = r.stdout.split('\n');
    expect(lines[0]).toBe(
      'clbprobe status: 3 node(s) answered, 3 did not; 2 Service(s) with findings, 1 with an active loop',
    );
    const row = (svc: string, mech: string) =>
      lines.find((l) => l.startsWith(`${svc} `) && l.includes(` ${mech} `))?.split(/\s{2,}/);
    expect(row('shop/api', 'L4-loop')).toEqual(['shop/api', 'L4-loop', 'active', 'TCP 80', '1 (node-a)', '1 (node-b)']);
    expect(row('shop/admin', 'source-ranges')).toEqual([
      'shop/admin',
      'source-ranges',
      'risk',
      'TCP 443',
      '-',
      '1 (node-c)',
    ]);
    expect(r.stdout).toMatch(/node-d \(clbprobe-node-d\): no answer: cannot reach the agent at 127\.3\.0\.4:\d+/);
    expect(r.stdout).toMatch(
      /node-e \(clbprobe-node-e\): no answer: the agent answered 404: .*an agent older than \/findings/,
    );
    expect(r.stdout).toMatch(/node-f \(clbprobe-node-f\): no answer: .*Pending/);
  }, 60_000);

  it('filters, JSON, the HTML page and the fix commands; exit codes follow what is shown', async () => {
    const b = await status('sre', '--node', 'node-b', '--json');
    expect(b.code, b.stderr).toBe(0);
    const j = JSON.parse(b.stdout) as {
      nodes: { node: string; status: string }[];
      services: { service: string; mechanism: string; severity: string; risk: string[] }[];
    };
    expect(j.nodes.map((n) => [n.node, n.status])).toEqual([['node-b', 'ok']]);
    expect(j.services.map((s) => [s.service, s.mechanism, s.severity, s.risk])).toEqual(
      diagnose(loadCase('tke-ipvs-unbound-config-only').input)
        .findings.filter((f) => f.severity === 'risk')
        .map((f) => [`${f.service.namespace}/${f.service.name}`, f.mechanism, 'risk', ['node-b']]),
    );
    const active = await status('sre', '--severity', 'active', '--namespace', 'shop', '--json');
    const aj = JSON.parse(active.stdout) as { services: { severity: string }[] };
    expect(aj.services.length).toBeGreaterThan(0);
    expect(aj.services.every((s) => s.severity === 'active')).toBe(true);
    const admin = await status('sre', '--service', 'shop/admin', '--fix-commands');
    expect(admin.stdout).toContain(
      `kubectl -n shop patch service admin --type json -p '[{"op":"add","path":"/spec/loadBalancerSourceRanges/-","value":"10.244.1.0/24"}]'`,
    );
    expect(admin.stdout).not.toContain('service api');
    // No active loop for shop/admin, and three agents did not answer: not a clean 0.
    expect(admin.code).toBe(2);
    const html = join(dir, 'cluster.html');
    const h = await status('sre', '--html', html);
    expect(h.code).toBe(1);
    const page = readFileSync(html, 'utf8');
    expect(page).toContain('<h2>Service shop/api</h2>');
    expect(page).toContain('<h3>node node-a</h3>');
    expect(page).toContain('<svg class="path"');
    expect(page).toContain('node-d (clbprobe-node-d): no answer');
    if (CHROMIUM) {
      // What a person sees: the table, the Service's section with node-a's drawn loop, the silent nodes.
      const browser = await openPage(1280, 1400);
      try {
        await browser.navigate(`file://${html}`);
        const seen = await browser.evaluate<{ t: string; shown: boolean }[]>(
          `${JSON.stringify(['Service shop/api', 'node node-a', 'L4-loop', '1 (node-a)', 'node-d (clbprobe-node-d): no answer', 'skips the LB'])}.map((t) => {
            const el = [...document.querySelectorAll('body *')].find((e) => e.children.length === 0 && (e.textContent || '').includes(t));
            const r = el ? el.getBoundingClientRect() : { width: 0, height: 0 };
            return { t, shown: r.width > 0 && r.height > 0 };
          })`,
        );
        expect(seen.filter((x) => !x.shown)).toEqual([]);
        expect(
          await browser.evaluate<number>(`document.querySelectorAll('svg.path rect').length`),
        ).toBeGreaterThanOrEqual(3);
        // The table, the silent nodes and the first Service's loop: docs/status-report.png.
        const png = await browser.screenshot({ width: 1280, height: 1100 });
        expect(png.subarray(1, 4).toString()).toBe('PNG');
        const artifacts = join(import.meta.dirname, '../../test-artifacts');
        mkdirSync(artifacts, { recursive: true });
        writeFileSync(join(artifacts, 'status-report.png'), png);
      } finally {
        await browser.close();
      }
    }
    // The kubectl plugin is the same command.
    const k = await cli([PLUGIN, 'status', '--kubeconfig', kubeconfigs.sre!, '--node', 'node-b']);
    expect(k.code, k.stderr).toBe(0);
    // A node no agent runs on: nothing is known, not a clean 0.
    const typo = await status('sre', '--node', 'node-bb');
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('status: no agent answered for node "node-bb"');
  }, 120_000);

  it('each user sees only the findings of Services they may get; without the on-call role, nothing', async () => {
    const t = await status('tenant', '--json');
    const tj = JSON.parse(t.stdout) as { services: { service: string }[]; findings: { service: { name: string } }[] };
    expect(new Set(tj.services.map((s) => s.service))).toEqual(new Set(['shop/admin']));
    expect(tj.findings.every((f) => f.service.name === 'admin')).toBe(true);
    expect(t.code).toBe(2);
    const d = await status('dev');
    expect(d.code).toBe(2);
    expect(d.stdout).toBe('');
    expect(d.stderr).toContain('403');
    expect(d.stderr).toContain('clbprobe-evidence');
  }, 60_000);
  it('an active loop: exactly one Warning Event LoadBalancerLoopback on its Service, cluster-wide, and one Normal Event when it clears', async () => {
    type Ev = {
      type: string;
      reason: string;
      message: string;
      involvedObject: { kind: string; name: string; namespace: string };
    };
    const events = (): Ev[] =>
      (JSON.parse(cp.kubectl(['get', 'events', '-n', 'shop', '-o', 'json'])) as { items: Ev[] }).items.filter(
        (e) => e.reason === EVENT_REASON || e.reason === EVENT_REASON_CLEARED,
      );
    // Two relay replicas, as deploy/evidence-relay.yaml runs them, each with the relay's service account.
    // One clock for both, so that a 10-minute bucket boundary cannot fall between their rounds.
    const t0 = Date.now();
    const replicas = ['relay-1', 'relay-2'].map(
      (i) =>
        new EventRecorder({
          ...ask,
          create: eventCreator(relayTarget, i),
          quietPeriodMs: 600_000,
          perMinute: 30,
          burst: 60,
          now: () => t0,
        }),
    );
    const loop = significant('tke-ipvs-unbound-l4-loop');
    const calm = significant('tke-ipvs-unbound-config-only');
    expect(loop.some((f) => f.severity === 'active')).toBe(true);
    expect(calm.some((f) => f.severity === 'active')).toBe(false);
    held['node-a'] = loop;
    held['node-b'] = loop;
    for (const r of [...replicas, ...replicas]) await r.poll();
    const warnings = events().filter((e) => e.type === 'Warning');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({
      reason: 'LoadBalancerLoopback',
      involvedObject: { kind: 'Service', name: 'api', namespace: 'shop' },
    });
    expect(warnings[0]!.message).toContain('L4-loop on 2 node(s): node-a, node-b');
    expect(warnings[0]!.message).toContain('Fix: kubectl -n shop patch service api');
    expect(replicas[1]!.counts.exists).toBe(1);
    // node-a's loop ends, node-b's goes on: nothing new.
    held['node-a'] = calm;
    for (const r of replicas) await r.poll();
    expect(events()).toHaveLength(1);
    // node-a loops again, then cannot answer (503) while node-b calms down: node-a's last answer stands, nothing clears.
    held['node-a'] = loop;
    for (const r of replicas) await r.poll();
    syncing.add('node-a');
    held['node-a'] = calm;
    held['node-b'] = calm;
    for (const r of replicas) await r.poll();
    expect(events()).toHaveLength(1);
    syncing.delete('node-a');
    for (const r of [...replicas, ...replicas]) await r.poll();
    const cleared = events().filter((e) => e.type === 'Normal');
    expect(cleared).toHaveLength(1);
    expect(cleared[0]).toMatchObject({
      reason: 'LoadBalancerLoopbackCleared',
      involvedObject: { name: 'api', namespace: 'shop' },
    });
    expect(events()).toHaveLength(2);
  }, 120_000);
});
