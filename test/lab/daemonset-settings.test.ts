// The agent started with exactly deploy/daemonset.yaml's command, args, env and
// security context, read from the manifest: node's own flags (a flag node
// refuses fails here), the four capabilities and no others (bounding set, no
// new privileges), a read-only root with the manifest's volumes as the only
// writable paths, root as the manifest's user, and hostNetwork as a network
// namespace this test builds (the loop lab's node1). The image test runs the
// same settings in a real container; this one needs no container engine.
// The API server the pod would reach through its service account is the test API
// server, reached from the namespace through a relay (KUBECONFIG stands in for the
// in-cluster credentials); it answers the agent's lists and watches and the token
// reviews of --metrics-auth. Namespaces are cbds-*.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLoopLab, LAB, type LoopLab } from '../../src/demo/lab.js';
import { parseSamples } from '../../src/export/parse-samples.js';
import {
  agentContainer,
  containerEnv,
  containerScript,
  hostArgv,
  nodeCommand,
  REPO_ROOT,
} from '../support/daemonset.js';
import { FakeApiServer } from '../support/fake-apiserver.js';
import { imageNode } from '../support/image-node.js';
import { isRoot } from '../support/netns.js';
import { type Relay, relay } from '../support/relay.js';
import { until } from '../support/wait.js';

const PREFIX = 'cbds-';
const CAP_BITS: Record<string, number> = { NET_ADMIN: 12, NET_RAW: 13, PERFMON: 38, BPF: 39 };

describe.skipIf(!isRoot)('the agent as deploy/daemonset.yaml starts it', () => {
  const c = agentContainer();
  let lab: LoopLab;
  let scratch: string;
  let agent: ChildProcess | undefined;
  let stderr = '';
  let exited: string | undefined;
  const port = Number(/:(\d+)$/.exec(c.args[c.args.indexOf('--listen') + 1] ?? '')?.[1] ?? 9811);
  const api = new FakeApiServer();
  const relays: Relay[] = [];
  /** Outside /tmp, which the container's emptyDir hides. */
  let apiDir: string | undefined;
  /** Prometheus' service-account token, allowed to get /metrics. */
  const PROM_TOKEN = 'prometheus-sa-token';
  const get = (path: string): string =>
    lab.node.run('curl', '-sS', '--max-time', '2', '-w', '\n%{http_code}', `http://127.0.0.1:${port}${path}`);
  /** Not blocking: the agent asks the test API server, in this process, about the token. */
  const getWithToken = (path: string, token: string): Promise<string> =>
    new Promise((resolve, reject) => {
      const p = spawn('ip', [
        'netns',
        'exec',
        lab.node.name,
        'curl',
        '-sS',
        '--max-time',
        '5',
        '-w',
        '\n%{http_code}',
        '-H',
        `Authorization: Bearer ${token}`,
        `http://127.0.0.1:${port}${path}`,
      ]);
      let out = '';
      p.stdout.on('data', (b: Buffer) => (out += b.toString()));
      p.on('error', reject);
      p.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`curl exited ${code}: ${out}`))));
    });

  beforeAll(async () => {
    if (!existsSync(hostArgv(c).find((a) => a.endsWith('.js')) ?? ''))
      throw new Error('dist missing: run npm run build first');
    expect(c.hostNetwork).toBe(true);
    scratch = mkdtempSync(join(tmpdir(), PREFIX));
    lab = await createLoopLab('Local', PREFIX);
    await api.start();
    api.access.addToken(PROM_TOKEN, {
      username: 'system:serviceaccount:monitoring:prometheus-k8s',
      groups: ['system:serviceaccounts'],
    });
    api.access.grant({
      subject: { user: 'system:serviceaccount:monitoring:prometheus-k8s' },
      rule: { verbs: ['get'], nonResourceURLs: ['/metrics'] },
    });
    apiDir = mkdtempSync('/var/tmp/cbds-api-');
    const sock = join(apiDir, 'api.sock');
    relays.push(await relay(undefined, { path: sock }, { port: Number(new URL(api.url).port) }));
    relays.push(await relay(lab.node.name, { port: 16443 }, { path: sock }));
    writeFileSync(join(apiDir, 'kubeconfig'), api.kubeconfig().replace(api.url, 'http://127.0.0.1:16443'));
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
    // /readyz: the first sync is done, every source has been read once.
    await until(
      '/readyz',
      20_000,
      () => {
        if (exited) throw new Error(`the agent ${exited} at start-up:\n${stderr}`);
        try {
          return get('/readyz').endsWith('\n200') ? true : undefined;
        } catch {
          return undefined; // not listening yet
        }
      },
      200,
    ).catch((e: Error) => {
      throw new Error(`${e.message}; the agent's log:\n${stderr}`);
    });
  }, 60_000);

  afterAll(async () => {
    agent?.kill('SIGKILL');
    for (const r of relays) r.close();
    await api.stop();
    if (apiDir) rmSync(apiDir, { recursive: true, force: true });
    lab?.destroy();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it("node accepts the command and the env, and the agent serves /healthz, and /metrics to Prometheus' token only", async () => {
    expect(exited).toBeUndefined();
    expect(get('/healthz').endsWith('\n200')).toBe(true);
    const anonymous = get('/metrics');
    expect(anonymous.endsWith('\n401'), anonymous).toBe(true);
    expect(anonymous).toContain('no bearer token');
    expect((await getWithToken('/metrics', 'not-a-known-token')).endsWith('\n401')).toBe(true);
    expect(api.access.log.filter((l) => l.kind === 'TokenReview').length).toBeGreaterThan(0);
    const body = await getWithToken('/metrics', PROM_TOKEN);
    expect(body.endsWith('\n200')).toBe(true);
    const up = Object.fromEntries(
      parseSamples(body)
        .filter((s) => s.name === 'clbprobe_source_up')
        .map((s) => [s.labels.source, s.value]),
    );
    // Every node source the four capabilities must be enough for; the eBPF counters included.
    expect(up).toMatchObject({ addresses: 1, 'local-routes': 1, nat: 1, conntrack: 1, capture: 1 });
    expect(stderr).toMatch(/"counter":"eBPF/);
  });

  it('runs with exactly the manifest capabilities, no new privileges, as its user', () => {
    const pid = lab.node
      .run('ip', 'netns', 'pids', lab.node.name)
      .split('\n')
      .filter(Boolean)
      .find((p) => {
        try {
          return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(
            nodeCommand(hostArgv(c)).script.slice(REPO_ROOT.length),
          );
        } catch {
          return false;
        }
      });
    expect(pid).toBeDefined();
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const field = (k: string) => BigInt(`0x${new RegExp(`^${k}:\\s*([0-9a-f]+)`, 'm').exec(status)![1]}`);
    const want = c.capabilities.add.reduce((m, name) => m | (1n << BigInt(CAP_BITS[name]!)), 0n);
    expect(field('CapEff').toString(16)).toBe(want.toString(16));
    expect(field('CapBnd').toString(16)).toBe(want.toString(16));
    expect(/^NoNewPrivs:\s*1/m.test(status)).toBe(!c.allowPrivilegeEscalation);
    expect(new RegExp(`^Uid:\\s*${c.runAsUser}\\s`, 'm').test(status)).toBe(true);
    // The image's Node release, not the host's, runs the command's `node`.
    expect(readlinkSync(`/proc/${pid}/exe`)).toBe(imageNode());
  });

  it('writes only where the manifest mounts a volume (the evidence socket on its hostPath)', async () => {
    const sock = c.mounts.findIndex((m) => m.hostPath !== undefined);
    expect(sock).toBeGreaterThanOrEqual(0);
    await until(
      'the evidence socket on the hostPath',
      5000,
      () => existsSync(join(scratch, `host${sock}`, 'evidence.sock')) || undefined,
    );
    expect(stderr).not.toMatch(/EROFS|read-only file system/i);
  });
});
