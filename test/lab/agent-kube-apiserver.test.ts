// The compiled agent as deploy/daemonset.yaml starts it (command, args, env and security context
// read from the manifest; test/support/daemonset.ts) against the real kube-apiserver v1.20.2
// (test/support/kube-control-plane.ts), with deploy/rbac.yaml applied as shipped and the
// ServiceAccount's own token: a real service-account JWT from the TokenRequest API, in the
// kubeconfig that stands in for the pod's mounted token. What it must do:
// - get a fresh cluster view (source_up{source="cluster"} 1) with series for the Services and
//   EndpointSlices (v1beta1 on 1.20) created through the API, and follow the watch;
// - --metrics-auth kubernetes (the DaemonSet's default) decided by the real TokenReview and
//   SubjectAccessReview: Prometheus' service-account token bound to the shipped
//   clbprobe-metrics-reader ClusterRole (the binding deploy/README.md gives) gets 200, a valid
//   token without it 403, no or a bad token 401, a new token while the API server is stopped 503;
// - /evidence (the evidence relay's per-node call) for whoever may get the Service, by the real
//   RBAC: a Role with resourceNames, one for the namespace's Services, deploy/oncall-rbac.yaml's Role;
// - the API server stopped and started (same etcd) while it runs: source down with the reason,
//   up again after, with what changed while it could not reach the server.
// The agent runs in the loop lab's node namespace (cbka-*, standing in for hostNetwork); the API
// server listens on 127.0.0.1 in the root namespace and is reached through a Unix-socket relay.
import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evidenceAudience } from '../../src/agent/evidence-http.js';
import { clusterList, createLoopLab, LAB, type LoopLab } from '../../src/demo/lab.js';
import { parseSamples, type Sample } from '../../src/export/parse-samples.js';
import { agentContainer, containerEnv, containerScript, hostArgv } from '../support/daemonset.js';
import { type ControlPlane, serviceAccountToken, startControlPlane } from '../support/kube-control-plane.js';
import { createList, createObject } from '../support/kube-objects.js';
import { kubeconfigText } from '../support/kubeconfig-text.js';
import { isRoot } from '../support/netns.js';
import { type Relay, relay } from '../support/relay.js';
import { jsonLines } from '../support/run-cli.js';
import { until } from '../support/wait.js';

const PREFIX = 'cbka-';
const DEPLOY = join(import.meta.dirname, '../../deploy');
const AGENT_USER = 'system:serviceaccount:clbprobe:clbprobe';
/** The port the agent's namespace reaches the API server on (the relay's end in there). */
const API_PORT_IN_NS = 16443;

type Svc = {
  kind: string;
  metadata: { name: string };
  spec: { clusterIP?: string; clusterIPs?: string[]; ports: { nodePort?: number }[] };
  status?: unknown;
};

/** The lab's Service under another name and LB IP, its cluster IP and NodePort left to the API server. */
function anotherService(name: string, ip: string): Record<string, unknown> {
  const svc = (clusterList('Cluster') as { items: Svc[] }).items.find((i) => i.kind === 'Service')!;
  svc.metadata.name = name;
  delete svc.spec.clusterIP;
  delete svc.spec.clusterIPs;
  for (const p of svc.spec.ports) delete p.nodePort;
  svc.status = { loadBalancer: { ingress: [{ ip }] } };
  return svc as unknown as Record<string, unknown>;
}

const find = (s: Sample[], name: string, labels: Record<string, string>): number | undefined =>
  s.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))?.value;

describe.skipIf(!isRoot)('the agent as the DaemonSet runs it, against the real kube-apiserver v1.20.2', () => {
  const c = agentContainer();
  const port = Number(/:(\d+)$/.exec(c.args[c.args.indexOf('--listen') + 1] ?? '')?.[1] ?? 9811);
  let cp: ControlPlane;
  let lab: LoopLab;
  let scratch: string;
  /** Outside /tmp, which the container's emptyDir hides. */
  let apiDir: string | undefined;
  let sock: string;
  let agent: ChildProcess | undefined;
  let stderr = '';
  let exited: string | undefined;
  let rootRelay: Relay | undefined;
  const relays: Relay[] = [];
  let promToken: string;

  const saToken = (ns: string, name: string, audiences?: string[]): Promise<string> =>
    serviceAccountToken(cp, ns, name, audiences);
  const serviceAccount = async (ns: string, name: string): Promise<void> => {
    const r = await cp.request('POST', `/api/v1/namespaces/${ns}/serviceaccounts`, {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: { name },
    });
    if (r.status !== 201 && r.status !== 409) throw new Error(`ServiceAccount ${ns}/${name}: ${r.status}`);
  };

  /** GET on the agent's port from inside its namespace; "BODY\nSTATUS". Async: the relays answer meanwhile. */
  /** `from`: the source address (each caller its own, as pods have: reviews for strangers are rate-limited per address). */
  const get = (path: string, token?: string, from?: string): Promise<{ status: number; body: string }> =>
    new Promise((resolve, reject) => {
      const args = [
        'netns',
        'exec',
        lab.node.name,
        'curl',
        '-sS',
        '--max-time',
        '10',
        '-w',
        '\n%{http_code}',
        ...(from ? ['--interface', from] : []),
        ...(token ? ['-H', `Authorization: Bearer ${token}`] : []),
        `http://127.0.0.1:${port}${path}`,
      ];
      const p = spawn('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      p.stdout.on('data', (b: Buffer) => (out += b.toString()));
      p.stderr.on('data', (b: Buffer) => (err += b.toString()));
      p.on('error', reject);
      p.on('close', (code) => {
        if (code !== 0) return reject(new Error(`curl ${path} exited ${code}: ${err}`));
        const nl = out.lastIndexOf('\n');
        resolve({ status: Number(out.slice(nl + 1)), body: out.slice(0, nl) });
      });
    });
  const scrape = async (): Promise<Sample[]> => {
    const r = await get('/metrics', promToken);
    if (r.status !== 200) throw new Error(`/metrics: ${r.status} ${r.body.slice(0, 200)}`);
    return parseSamples(r.body);
  };
  const clusterUp = async (): Promise<number | undefined> =>
    find(await scrape(), 'clbprobe_source_up', { source: 'cluster' });

  /** The root namespace's end of the agent's way to the API server (Unix socket -> 127.0.0.1:port). */
  const openRootRelay = async (): Promise<void> => {
    rmSync(sock, { force: true });
    rootRelay = await relay(undefined, { path: sock }, { port: cp.port });
  };

  beforeAll(async () => {
    if (!existsSync(hostArgv(c).find((a) => a.endsWith('.js')) ?? ''))
      throw new Error('dist missing: run npm run build first');
    cp = await startControlPlane();
    cp.kubectl(['apply', '-f', join(DEPLOY, 'namespace.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'rbac.yaml')]);
    await createList(cp, clusterList('Local') as { items: Record<string, unknown>[] });
    // Prometheus' service account, bound to the shipped reader role as deploy/README.md says.
    await cp.request('POST', '/api/v1/namespaces', {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: 'monitoring' },
    });
    await serviceAccount('monitoring', 'prometheus-k8s');
    await serviceAccount('monitoring', 'other');
    cp.kubectl([
      'create',
      'clusterrolebinding',
      'clbprobe-metrics-reader',
      '--clusterrole',
      'clbprobe-metrics-reader',
      '--serviceaccount',
      'monitoring:prometheus-k8s',
    ]);
    promToken = await saToken('monitoring', 'prometheus-k8s');

    scratch = mkdtempSync(join(tmpdir(), PREFIX));
    lab = await createLoopLab('Local', PREFIX);
    apiDir = mkdtempSync('/var/tmp/cbka-api-');
    sock = join(apiDir, 'api.sock');
    await openRootRelay();
    relays.push(await relay(lab.node.name, { port: API_PORT_IN_NS }, { path: sock }));
    copyFileSync(cp.caFile, join(apiDir, 'ca.crt'));
    // The pod's in-cluster credentials as a kubeconfig: the CA and the ServiceAccount's token.
    writeFileSync(
      join(apiDir, 'kubeconfig'),
      kubeconfigText(
        [`server: https://127.0.0.1:${API_PORT_IN_NS}`, `certificate-authority: ${join(apiDir, 'ca.crt')}`],
        [`token: ${await saToken('clbprobe', 'clbprobe')}`],
      ),
    );
    const env = {
      PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      ...containerEnv(c, { 'spec.nodeName': LAB.node1Name }),
      KUBECONFIG: join(apiDir, 'kubeconfig'),
    };
    agent = spawn('ip', ['netns', 'exec', lab.node.name, ...containerScript(c, scratch)], {
      env,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    agent.stderr!.on('data', (b: Buffer) => (stderr += b));
    agent.on('exit', (code, sig) => (exited = `exit ${code ?? sig}`));
    await until(
      '/readyz',
      40_000,
      async () => {
        if (exited) throw new Error(`the agent ${exited} at start-up:\n${stderr}`);
        return (await get('/readyz').catch(() => undefined))?.status === 200 ? true : undefined;
      },
      200,
    ).catch((e: Error) => {
      throw new Error(`${e.message}; the agent's log:\n${stderr}`);
    });
  }, 240_000);

  afterAll(async () => {
    agent?.kill('SIGKILL');
    rootRelay?.close();
    for (const r of relays) r.close();
    await cp?.stop();
    if (apiDir) rmSync(apiDir, { recursive: true, force: true });
    lab?.destroy();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it('gets a fresh cluster view with its ServiceAccount token: source_up 1, the Services as series, the watch followed', async () => {
    expect(exited).toBeUndefined();
    const s = await scrape();
    expect(find(s, 'clbprobe_source_up', { source: 'cluster' })).toBe(1);
    const web = { namespace: 'lab', service: 'web', port: '80', protocol: 'TCP' };
    // Followed; its series, if any, come from a finding (no traffic was sent to it).
    const followed = find(s, 'clbprobe_service_ports_followed', {})!;
    expect(followed).toBeGreaterThanOrEqual(1);
    expect(find(s, 'clbprobe_lb_path_packets_total', { ...web, kind: 'to_lb' }) ?? 0).toBe(0);
    expect(stderr).toContain('EndpointSlices: discovery.k8s.io/v1 not served (404), using v1beta1');
    expect(stderr).not.toContain('first list not complete');
    // Every list and watch went out as the ServiceAccount and was allowed.
    const mine = cp.audit().filter((e) => e.user.username === AGENT_USER);
    // Gateway API kinds are listed too; without their CRDs (none here) each answers 404 once: absent, logged as such.
    const gatewayLists = ['gatewayclasses', 'gateways', 'httproutes', 'grpcroutes'].map(
      (r) => `/apis/gateway.networking.k8s.io/v1/${r}`,
    );
    gatewayLists.push(
      ...['tlsroutes', 'tcproutes', 'udproutes'].map((r) => `/apis/gateway.networking.k8s.io/v1alpha2/${r}`),
      '/apis/gateway.networking.k8s.io/v1beta1/referencegrants',
    );
    expect(new Set(mine.filter((e) => e.verb === 'list').map((e) => e.requestURI.split('?')[0]))).toEqual(
      new Set([
        '/api/v1/services',
        '/api/v1/nodes',
        '/apis/discovery.k8s.io/v1/endpointslices',
        '/apis/discovery.k8s.io/v1beta1/endpointslices',
        '/apis/networking.k8s.io/v1/ingresses',
        ...gatewayLists,
      ]),
    );
    expect(
      mine
        .filter((e) => e.verb === 'list' && e.responseStatus?.code !== 200)
        .map((e) => `${e.requestURI.split('?')[0]} ${e.responseStatus?.code}`)
        .sort(),
    ).toEqual(['/apis/discovery.k8s.io/v1/endpointslices 404', ...gatewayLists.map((p) => `${p} 404`)].sort());
    expect(stderr).toContain('Gateway API not installed');

    // A Service created through the API now: followed within seconds (the watch, not a resync).
    const t0 = Date.now();
    await createObject(cp, anotherService('web3', '10.0.100.103'));
    await until(
      'lab/web3 followed',
      10_000,
      async () => (find(await scrape(), 'clbprobe_service_ports_followed', {}) === followed + 1 ? true : undefined),
      200,
    );
    expect(Date.now() - t0).toBeLessThan(10_000);
  }, 60_000);

  it("gives start-up's file pages back to the kernel after each of start-up's phases", () => {
    const lines = stderr
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.filter((l) => l.msg === 'start-up pages: not all released')).toEqual([]);
    const released = lines.filter((l) => l.msg === 'start-up pages released');
    expect(released.map((l) => l.phase)).toEqual(['modules loaded', 'sources read', 'first sync']);
    for (const l of released) expect(l.mappings).toBeGreaterThan(10); // node, libc, libstdc++, libbpf, the addon...
    // Pages another process maps too stay (the kernel skips them), and the agent's other threads fault
    // pages in meanwhile: with other agents running the same node, one phase may give nothing back.
    const drops = released.map((l) => (l.rssFileMBBefore as number) - (l.rssFileMBAfter as number));
    expect(Math.min(...drops), `RssFile given back per phase, MB: ${drops.join(', ')}`).toBeGreaterThan(-1);
    expect(
      drops.reduce((a, b) => a + b, 0),
      `RssFile given back per phase, MB: ${drops.join(', ')}`,
    ).toBeGreaterThan(0);
  });

  it('--metrics-auth kubernetes, decided by the real TokenReview and SubjectAccessReview', async () => {
    const none = await get('/metrics');
    expect(none.status).toBe(401);
    expect(none.body).toContain('no bearer token');
    expect((await get('/metrics', 'not-a-token')).status).toBe(401);
    // A forged JWT is refused by the API server's authenticator, not parsed by the agent.
    const forged = `${promToken.split('.').slice(0, 2).join('.')}.AAAA`;
    expect((await get('/metrics', forged)).status).toBe(401);
    const other = await get('/metrics', await saToken('monitoring', 'other'));
    expect(other.status).toBe(403);
    expect(other.body).toContain('system:serviceaccount:monitoring:other');
    expect((await get('/metrics', promToken)).status).toBe(200);
    // /healthz and /readyz stay open for the kubelet's probes.
    expect((await get('/healthz')).status).toBe(200);
    // The agent asked, as itself, and the API server allowed it to ask (deploy/rbac.yaml's two creates).
    const reviews = cp.audit().filter((e) => e.user.username === AGENT_USER && e.verb === 'create');
    expect(
      reviews.some(
        (e) => e.requestURI === '/apis/authentication.k8s.io/v1/tokenreviews' && e.responseStatus?.code === 201,
      ),
    ).toBe(true);
    expect(
      reviews.some(
        (e) => e.requestURI === '/apis/authorization.k8s.io/v1/subjectaccessreviews' && e.responseStatus?.code === 201,
      ),
    ).toBe(true);
    expect(reviews.filter((e) => e.responseStatus?.code !== 201)).toEqual([]);
  }, 60_000);

  it("/evidence (what the evidence relay calls with the on-call engineer's token): whoever may get the Service, decided by the real RBAC", async () => {
    // A reader of lab/web only (resourceNames), a reader of every Service in lab, and an on-call user
    // with deploy/oncall-rbac.yaml's Role alone. (Not the bootstrap `view` role: it is filled by the
    // controller-manager's aggregation, which does not run here.)
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
    cp.kubectl(['create', 'role', 'service-reader', '-n', 'lab', '--verb', 'get,list', '--resource', 'services']);
    for (const [sa, ns] of [
      ['web-reader', 'lab'],
      ['viewer', 'lab'],
      ['oncall', 'clbprobe'],
    ] as const)
      await serviceAccount(ns, sa);
    cp.kubectl([
      'create',
      'rolebinding',
      'web-reader',
      '-n',
      'lab',
      '--role',
      'web-reader',
      '--serviceaccount',
      'lab:web-reader',
    ]);
    cp.kubectl([
      'create',
      'rolebinding',
      'viewer',
      '-n',
      'lab',
      '--role',
      'service-reader',
      '--serviceaccount',
      'lab:viewer',
    ]);
    cp.kubectl(['apply', '-f', join(DEPLOY, 'oncall-rbac.yaml')]);
    cp.kubectl([
      'create',
      'rolebinding',
      'clbprobe-oncall',
      '-n',
      'clbprobe',
      '--role',
      'clbprobe-oncall',
      '--serviceaccount',
      'clbprobe:oncall',
    ]);
    // Tokens for this node's evidence audience (what the relay sends); an ordinary one is refused.
    const forNode = [evidenceAudience(LAB.node1Name)];
    const [webReader, viewer, oncall] = [
      await saToken('lab', 'web-reader', forNode),
      await saToken('lab', 'viewer', forNode),
      await saToken('clbprobe', 'oncall', forNode),
    ];
    let caller = 0;
    const evidence = (service: string, token?: string) =>
      get(`/evidence?service=${service}`, token, `127.0.7.${++caller}`);
    expect((await evidence('lab/web', await saToken('lab', 'web-reader'))).status).toBe(401);

    const allowed = await evidence('lab/web', webReader);
    expect(allowed.status, allowed.body).toBe(200);
    const lines = jsonLines<{ type: string }>(allowed.body);
    expect(lines[0]).toMatchObject({ type: 'service', node: LAB.node1Name });
    expect(lines.at(-1)).toMatchObject({ type: 'end' });
    expect((await evidence('lab/web3', webReader)).status).toBe(403);
    expect((await evidence('lab/web3', viewer)).status).toBe(200);
    expect((await evidence('clbprobe/clbprobe-evidence', viewer)).status).toBe(403);
    // The on-call Role opens the relay's proxy and nothing else: no Service's evidence by itself.
    const denied = await evidence('lab/web', oncall);
    expect(denied.status).toBe(403);
    expect(denied.body).toContain('system:serviceaccount:clbprobe:oncall');
    expect((await evidence('lab/web')).status).toBe(401);
    // ...and the hop it is for: the API server's service proxy to the relay, as that user.
    const sar = async (user: string, attrs: Record<string, string>): Promise<boolean> => {
      const r = await cp.request('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: { user, groups: ['system:serviceaccounts', 'system:authenticated'], resourceAttributes: attrs },
      });
      return (r.body as { status: { allowed: boolean } }).status.allowed;
    };
    const proxy = { namespace: 'clbprobe', verb: 'get', resource: 'services', subresource: 'proxy' };
    expect(await sar('system:serviceaccount:clbprobe:oncall', { ...proxy, name: 'clbprobe-evidence' })).toBe(true);
    expect(await sar('system:serviceaccount:clbprobe:oncall', { ...proxy, name: 'other' })).toBe(false);
    expect(
      await sar('system:serviceaccount:clbprobe:oncall', {
        namespace: 'clbprobe',
        verb: 'create',
        resource: 'pods',
        subresource: 'exec',
      }),
    ).toBe(false);
  }, 60_000);

  it('the API server stops and starts again (same etcd): down with the reason, 503 for new tokens, up again with what changed meanwhile', async () => {
    const freshToken = await saToken('monitoring', 'prometheus-k8s');
    const followed = find(await scrape(), 'clbprobe_service_ports_followed', {})!;
    await cp.stopApiServer();
    // Prometheus' token was reviewed before: the cached answer keeps /metrics readable meanwhile.
    await until('source_up{cluster} 0', 30_000, async () => ((await clusterUp()) === 0 ? true : undefined), 250);
    expect(stderr).toMatch(
      /"reason":"API unavailable, showing the last good view: [^"]*(connection to the API server lost|socket hang up|ECONNRESET|ECONNREFUSED|disconnected)[^"]*","msg":"cluster view is stale"/,
    );
    // Still counting for the Services it knew.
    expect(find(await scrape(), 'clbprobe_service_ports_followed', {})).toBe(followed);
    // A token it has not seen cannot be reviewed now: 503, not a 401 or 403 the caller would believe.
    const unknown = await get('/metrics', freshToken);
    expect(unknown.status, unknown.body).toBe(503);

    // While the agent cannot reach it, the server comes back and a Service is added; then it
    // restarts once more, so its watch cache begins after the change (the agent's watch gets a 410).
    rootRelay!.close();
    await cp.startApiServer();
    await createObject(cp, anotherService('web4', '10.0.100.104'));
    await cp.restartApiServer();
    await openRootRelay();
    const t0 = Date.now();
    // The agent backs off up to 30 s between attempts, as client-go's reflector does.
    await until(
      'source_up{cluster} 1 with lab/web4',
      60_000,
      async () => {
        const s = await scrape();
        return find(s, 'clbprobe_source_up', { source: 'cluster' }) === 1 &&
          find(s, 'clbprobe_service_ports_followed', {}) === followed + 1
          ? true
          : undefined;
      },
      250,
    );
    const backMs = Date.now() - t0;
    expect(backMs).toBeLessThan(45_000);
    expect(stderr).toContain('cluster API reachable again; view is fresh');
    expect((await get('/metrics', freshToken)).status).toBe(200);
    console.log(`agent: cluster source up ${backMs} ms after the API server could be reached again`);
  }, 240_000);
});
