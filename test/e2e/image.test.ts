// The image, built by a real container engine from the Dockerfile as shipped,
// and run as deploy/daemonset.yaml runs it (read from the file, never copied):
// - podman builds the Dockerfile (--pull=never: the base images named by its
//   FROM lines are the ones scripts/setup-image.sh assembled; --network=host for
//   apt and npm), and the runtime image stays within its size budget;
// - the DaemonSet's init container installs the seccomp profile into a
//   directory standing for the kubelet's, and the agent container runs with
//   the manifest's command, args, env, capabilities, no new privileges, user,
//   read-only root, volumes (the evidence socket on its hostPath), memory limit
//   and Localhost seccomp profile, in node1 of the loop lab (hostNetwork);
// - it reaches the fake API server in-cluster style, as a pod does: the
//   kubelet's KUBERNETES_SERVICE_HOST/PORT and a mounted service account token
//   + CA; the API is served over TLS on the node's loopback by a relay that
//   crosses to this process through a Unix socket (no packet leaves the
//   namespaces);
// - it must attach its eBPF counters, read addresses, conntrack and NAT with
//   the image's own tools, serve /healthz, /readyz and /metrics, and count a
//   real loop; `clbprobe evidence`, `diagnose` and `collect` then run through
//   `podman exec`, as `kubectl exec` would, and every command they run is found;
// - the same settings under podman's default seccomp profile: eBPF is refused,
//   and the agent says it is seccomp, naming the fix.
// Namespaces are cbi-*; containers cbi-*.
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentProfile, renderProfile } from '../../scripts/seccomp-profile.js';
import { AGENT_ENTRYPOINT } from '../../src/cli/evidence-remote.js';
import { clusterList, createLoopLab, LAB, type LoopLab } from '../../src/demo/lab.js';
import { parseSamples, type Sample } from '../../src/export/parse-samples.js';
import { type AgentContainer, agentContainer, podContainer, REPO_ROOT } from '../support/daemonset.js';
import { FakeApiServer, type ResourceName } from '../support/fake-apiserver.js';
import { isRoot } from '../support/netns.js';
import { podman, podmanQuiet, podmanRunArgs } from '../support/podman.js';
import { buildProductImage } from '../support/product-image.js';
import { type Relay, relay } from '../support/relay.js';
import { jsonLines } from '../support/run-cli.js';
import { until } from '../support/wait.js';

const PREFIX = 'cbi-';
/** The init container's hostPath: clbprobe's subdirectory of the kubelet's seccomp directory. */
const SECCOMP_HOST_PATH = '/var/lib/kubelet/seccomp/clbprobe';
const CAP_BITS: Record<string, number> = { NET_ADMIN: 12, NET_RAW: 13, PERFMON: 38, BPF: 39 };
const RESOURCE_OF: Record<string, ResourceName> = {
  Service: 'services',
  EndpointSlice: 'endpointslices',
  Node: 'nodes',
};
/** Where the kubelet puts the service account, and the API's address as a pod sees it (this node's loopback). */
const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';
const API_HOST = '127.0.0.1';
const API_PORT = 6443;
/** Prometheus' service-account token, allowed to get /metrics (the DaemonSet's --metrics-auth kubernetes). */
const PROM_TOKEN = 'prometheus-sa-token';
/**
 * Size budget of the runtime image (podman image inspect). Measured at 378 MB: the Node 24 binary
 * 121 MB and its headers 67 MB (both as Node's official images ship them in /usr/local), Debian
 * bookworm slim + the addon's libraries + the tools the agent runs ~105 MB, /app (dist, production
 * node_modules, the addon and BPF objects) 84 MB. 400 MB leaves ~5 % for Node and Debian point
 * releases; what we control has its own budget: /app under 100 MB fails on a dev dependency, a test
 * tree or a toolchain shipped by mistake.
 */
const IMAGE_BUDGET_MB = 400;
const APP_BUDGET_MB = 100;

const find = (s: Sample[], name: string, labels: Record<string, string>): number | undefined =>
  s.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))?.value;

describe.skipIf(!isRoot)('the image, built with podman and run as deploy/daemonset.yaml runs it', () => {
  const agent = agentContainer();
  const init = podContainer('seccomp-profile');
  const image = agent.image;
  const names: string[] = [];
  let scratch: string;
  let lab: LoopLab;
  let api: FakeApiServer;
  let tls: TlsServer;
  let apiRelay: Relay | undefined;
  let buildSeconds = 0;
  const port = Number(/:(\d+)$/.exec(agent.args[agent.args.indexOf('--listen') + 1] ?? '')?.[1] ?? 9811);

  /**
   * curl in node1, with Prometheus' token (the DaemonSet's --metrics-auth kubernetes asks the API server
   * about it: not blocking, the test API server lives in this process). Rejects when nothing listens.
   */
  const get = (path: string): Promise<string> =>
    new Promise((resolve, reject) => {
      const p = spawn(
        'ip',
        [
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
          `Authorization: Bearer ${PROM_TOKEN}`,
          `http://127.0.0.1:${port}${path}`,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      p.stdout.on('data', (b: Buffer) => (out += b));
      p.once('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`curl ${path} exited ${code}`))));
    });
  const logs = (name: string): string => {
    const r = podmanQuiet(['logs', name]);
    return r.stdout + r.stderr;
  };
  /** podman exec; resolves with exit status and output (asynchronous: the fake API lives in this process). */
  const exec = (name: string, argv: string[]): Promise<{ code: number | null; out: string; err: string }> =>
    new Promise((resolve) => {
      const p = spawn('podman', ['exec', name, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      p.stdout.on('data', (b: Buffer) => (out += b));
      p.stderr.on('data', (b: Buffer) => (err += b));
      const kill = setTimeout(() => p.kill('SIGKILL'), 60_000);
      p.once('close', (code) => {
        clearTimeout(kill);
        resolve({ code, out, err });
      });
    });

  /** Starts the agent container as the manifest says (with `container` overriding it), waits for /readyz. */
  async function startAgent(name: string, container: AgentContainer): Promise<void> {
    names.push(name);
    podmanQuiet(['rm', '-f', name]);
    const hostRun = join(scratch, `${name}-run`);
    mkdirSync(hostRun, { recursive: true });
    podman(
      podmanRunArgs(container, {
        name,
        netnsPath: lab.node.path,
        hostDirs: { '/run/clbprobe': hostRun, [SECCOMP_HOST_PATH]: join(scratch, 'kubelet-seccomp', 'clbprobe') },
        kubeletSeccompDir: join(scratch, 'kubelet-seccomp'),
        fields: { 'spec.nodeName': LAB.node1Name },
        extraEnv: { KUBERNETES_SERVICE_HOST: API_HOST, KUBERNETES_SERVICE_PORT: String(API_PORT) },
        extraMounts: { [join(scratch, 'serviceaccount')]: SERVICE_ACCOUNT },
      }),
    );
    await until(
      `${name}: /readyz`,
      60_000,
      async () => {
        const state = podmanQuiet(['inspect', '--format', '{{.State.Status}}', name]).stdout.trim();
        if (state !== 'running') throw new Error(`${name} is ${state}:\n${logs(name)}`);
        return (await get('/readyz').catch(() => '')).endsWith('\n200') ? true : undefined; // '' : not listening yet
      },
      500,
    ).catch((e: Error) => {
      throw new Error(`${e.message}\nthe agent's log:\n${logs(name)}`);
    });
  }

  function stop(name: string): void {
    podmanQuiet(['rm', '-f', '-t', '2', name]);
  }

  /** The API server over TLS, reached from node1's loopback through a Unix socket into this process. */
  async function startApi(): Promise<void> {
    api = new FakeApiServer();
    for (const item of (clusterList('Local') as { items: { kind: string }[] }).items)
      api.apply(RESOURCE_OF[item.kind]!, item);
    await api.start();
    const sa = join(scratch, 'serviceaccount');
    mkdirSync(sa);
    const r = spawnSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=kube-apiserver',
        '-addext',
        `subjectAltName=IP:${API_HOST}`,
        '-keyout',
        join(scratch, 'api.key'),
        '-out',
        join(sa, 'ca.crt'),
      ],
      { encoding: 'utf8' },
    );
    if (r.status !== 0) throw new Error(`openssl: ${r.stderr}`);
    writeFileSync(join(sa, 'token'), 'fake-token\n');
    writeFileSync(join(sa, 'namespace'), 'clbprobe\n');
    api.access.addToken(PROM_TOKEN, {
      username: 'system:serviceaccount:monitoring:prometheus-k8s',
      groups: ['system:serviceaccounts'],
    });
    api.access.grant({
      subject: { user: 'system:serviceaccount:monitoring:prometheus-k8s' },
      rule: { verbs: ['get'], nonResourceURLs: ['/metrics'] },
    });
    const apiPort = Number(new URL(api.url).port);
    tls = createTlsServer(
      { key: readFileSync(join(scratch, 'api.key')), cert: readFileSync(join(sa, 'ca.crt')) },
      (s) => {
        const up: Socket = connect(apiPort, '127.0.0.1');
        s.pipe(up).pipe(s);
        s.on('error', () => up.destroy());
        up.on('error', () => s.destroy());
      },
    );
    const sock = join(scratch, 'api.sock');
    await new Promise<void>((res) => tls.listen(sock, () => res()));
    chmodSync(sock, 0o600);
    // In node1's namespace: 127.0.0.1:6443 -> the Unix socket (bytes only; TLS ends in this process).
    apiRelay = await relay(lab.node.name, { port: API_PORT }, { path: sock });
  }

  beforeAll(async () => {
    const [full, slim] = spawnSync('bash', [join(REPO_ROOT, 'scripts/setup-image.sh'), '--print'], { encoding: 'utf8' })
      .stdout.trim()
      .split(' ');
    for (const base of [full!, slim!]) {
      if (podmanQuiet(['image', 'exists', base]).status !== 0)
        throw new Error(`base image ${base} missing: run scripts/setup-image.sh (sudo npm test does)`);
    }
    scratch = mkdtempSync(join(tmpdir(), PREFIX));
    const t0 = performance.now();
    buildProductImage(image, scratch);
    buildSeconds = (performance.now() - t0) / 1000;
    console.log(
      `image: podman build ${image} took ${buildSeconds.toFixed(0)} s (load ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')})`,
    );
    // The kubelet's seccomp directory, with clbprobe's own subdirectory (the hostPath is DirectoryOrCreate).
    mkdirSync(join(scratch, 'kubelet-seccomp', 'clbprobe'), { recursive: true });
    lab = await createLoopLab('Local', PREFIX);
    await startApi();
  }, 45 * 60_000);

  afterAll(async () => {
    for (const n of names) stop(n);
    apiRelay?.close();
    await new Promise<void>((res) => (tls ? tls.close(() => res()) : res()));
    await api?.stop();
    lab?.destroy();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  }, 60_000);

  it('builds from the Dockerfile as shipped and stays within its size budget', () => {
    const bytes = Number(podman(['image', 'inspect', '--format', '{{.Size}}', image]).trim());
    const app = podman(['run', '--rm', '--pull=never', '--network=none', '--entrypoint=["du","-sm","/app"]', image]);
    const appMb = Number(app.split('\t')[0]);
    console.log(
      `image: ${image} is ${(bytes / 1e6).toFixed(0)} MB (/app ${appMb} MB); budget ${IMAGE_BUDGET_MB} MB (/app ${APP_BUDGET_MB} MB)`,
    );
    expect(bytes / 1e6).toBeLessThan(IMAGE_BUDGET_MB);
    expect(appMb).toBeLessThan(APP_BUDGET_MB);
  });

  it("the init container installs the seccomp profile we ship, which is the engine's default minus what the agent does not need plus bpf and perf_event_open", async () => {
    names.push(`${PREFIX}init`);
    podmanQuiet(['rm', '-f', `${PREFIX}init`]);
    podman(
      podmanRunArgs(init, {
        name: `${PREFIX}init`,
        netnsPath: lab.node.path,
        hostDirs: { [SECCOMP_HOST_PATH]: join(scratch, 'kubelet-seccomp', 'clbprobe') },
      }),
    );
    const code = podman(['wait', `${PREFIX}init`]).trim();
    expect(code, logs(`${PREFIX}init`)).toBe('0');
    const installed = readFileSync(join(scratch, 'kubelet-seccomp', agent.seccompProfile.localhostProfile!), 'utf8');
    const shipped = readFileSync(join(REPO_ROOT, 'deploy/seccomp/clbprobe.json'), 'utf8');
    expect(installed).toBe(shipped);
    // Regenerated from this engine's default for the manifest's capabilities: the shipped file has not drifted.
    const engineDefault = JSON.parse(readFileSync('/usr/share/containers/seccomp.json', 'utf8'));
    expect(renderProfile(agentProfile(engineDefault, agent.capabilities.add))).toBe(shipped);
  });

  describe('with the shipped seccomp profile', () => {
    const name = `${PREFIX}agent`;
    beforeAll(async () => {
      if (!existsSync(join(scratch, 'kubelet-seccomp', agent.seccompProfile.localhostProfile!)))
        throw new Error('the init container did not run');
      await startAgent(name, agent);
    }, 120_000);
    // Kept running for the kubectl plugin's tests below; the default-profile run stops it.

    it('runs with exactly the manifest capabilities, no new privileges, its user, a seccomp filter and a read-only root', () => {
      const pid = podman(['inspect', '--format', '{{.State.Pid}}', name]).trim();
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const field = (k: string) => BigInt(`0x${new RegExp(`^${k}:\\s*([0-9a-f]+)`, 'm').exec(status)![1]}`);
      const want = agent.capabilities.add.reduce((m, c) => m | (1n << BigInt(CAP_BITS[c]!)), 0n);
      expect(field('CapEff').toString(16)).toBe(want.toString(16));
      expect(field('CapBnd').toString(16)).toBe(want.toString(16));
      expect(/^NoNewPrivs:\s*1/m.test(status)).toBe(!agent.allowPrivilegeEscalation);
      expect(/^Seccomp:\s*2/m.test(status)).toBe(true);
      expect(new RegExp(`^Uid:\\s*${agent.runAsUser}\\s`, 'm').test(status)).toBe(true);
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
      expect(cmdline).toEqual([...agent.command, ...agent.args]);
      expect(podmanQuiet(['exec', name, 'touch', '/app/x']).stderr).toMatch(/Read-only file system/);
    });

    it('serves /healthz and /metrics with every node source up, eBPF counting, the API reached in-cluster', async () => {
      expect((await get('/healthz')).endsWith('\n200')).toBe(true);
      const s = parseSamples(await get('/metrics'));
      const up = Object.fromEntries(
        s.filter((x) => x.name === 'clbprobe_source_up').map((x) => [x.labels.source, x.value]),
      );
      expect(up, logs(name)).toMatchObject({ addresses: 1, nat: 1, conntrack: 1, capture: 1, cluster: 1 });
      const log = logs(name);
      expect(log).toMatch(/"counter":"eBPF/);
      expect(log).toMatch(/conntrack events pre-filtered in the kernel/);
      expect(log).not.toMatch(/not found in PATH|EROFS|read-only file system|blocked by seccomp/i);
      expect(api.requests.some((r) => r.resource === 'services')).toBe(true);
    });

    it('counts a real loop', async () => {
      const web = { namespace: 'lab', service: 'web', port: '80', protocol: 'TCP' };
      expect(await lab.connect(2000)).toBe('timeout');
      await until(
        'loop_return and the active L4-loop finding',
        15_000,
        async () => {
          const s = parseSamples(await get('/metrics'));
          const looped = (find(s, 'clbprobe_lb_path_packets_total', { ...web, kind: 'loop_return' }) ?? 0) > 0;
          return looped &&
            find(s, 'clbprobe_findings_active', { ...web, mechanism: 'L4-loop', severity: 'active' }) === 1
            ? true
            : undefined;
        },
        500,
      );
    }, 30_000);

    it('`clbprobe evidence` and `diagnose` run through podman exec, as kubectl exec runs them', async () => {
      const ev = await exec(name, [...AGENT_ENTRYPOINT, 'evidence', '--service', 'lab/web', '--json']);
      expect(ev.code, ev.err).toBe(0);
      expect(ev.out).toContain(LAB.vip);
      expect(existsSync(join(scratch, `${name}-run`, 'evidence.sock'))).toBe(true); // on the hostPath
      const d = await exec(name, [...AGENT_ENTRYPOINT, 'diagnose', '--json']);
      expect(d.code, d.err).toBe(1); // 1: an active finding
      const json = JSON.parse(d.out) as {
        findings: { mechanism: string; severity: string; service: { name: string } }[];
      };
      expect(
        json.findings.filter((f) => f.severity === 'active').map((f) => `${f.service.name} ${f.mechanism}`),
      ).toContain('web L4-loop');
    }, 90_000);

    it('finds every command it runs in the image (`clbprobe collect` runs them all)', async () => {
      const c = await exec(name, ['clbprobe', 'collect', '--out', '/tmp/bundle']);
      expect(c.code, c.err).toBe(0);
      const manifest = JSON.parse((await exec(name, ['cat', '/tmp/bundle/manifest.json'])).out) as {
        files: { command: string; error?: string; skipped?: boolean }[];
      };
      const missing = manifest.files.filter((f) => /not found/i.test(f.error ?? ''));
      expect(missing).toEqual([]);
      const ran = manifest.files.filter((f) => !f.skipped && !f.error).map((f) => f.command.split(' ')[0]);
      // The agent's own NAT reads (src/kernel/nat/read.ts) are among them: both xtables backends and ipset.
      expect(ran).toEqual(
        expect.arrayContaining([
          'ip',
          'ipset',
          'sysctl',
          'iptables-legacy-save',
          'ip6tables-legacy-save',
          'iptables-nft-save',
          'ip6tables-nft-save',
        ]),
      );
    }, 90_000);
  });

  describe('the kubectl plugin, through a real kubectl', () => {
    const name = `${PREFIX}agent`;
    const kubectl = '/var/cache/clbprobe-image/kubernetes-client/usr/bin/kubectl';
    let env: NodeJS.ProcessEnv;
    let kubeconfig: string;
    /** kubectl ARGS without blocking this process (the fake API server lives here). */
    const run = (
      args: string[],
      extraEnv: NodeJS.ProcessEnv = {},
    ): Promise<{ code: number | null; out: string; err: string }> =>
      new Promise((resolve) => {
        const p = spawn(kubectl, args, { env: { ...env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        p.stdout.on('data', (b: Buffer) => (out += b));
        p.stderr.on('data', (b: Buffer) => (err += b));
        p.once('close', (code) => resolve({ code, out, err }));
      });

    beforeAll(async () => {
      if (!existsSync(kubectl)) throw new Error(`${kubectl} missing: run scripts/setup-image.sh`);
      // The README's install step: the plugin linked onto PATH.
      const bin = join(scratch, 'path');
      mkdirSync(bin);
      symlinkSync(join(REPO_ROOT, 'bin/kubectl-clbprobe'), join(bin, 'kubectl-clbprobe'));
      env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, HOME: scratch };
      delete env.KUBECONFIG;
      // Two contexts: the current one's credentials are refused; "lab" is the cluster.
      kubeconfig = join(scratch, 'workstation-kubeconfig');
      writeFileSync(
        kubeconfig,
        [
          'apiVersion: v1',
          'kind: Config',
          'current-context: other',
          'clusters:',
          '- name: lab',
          '  cluster:',
          `    server: ${api.url}`,
          '    insecure-skip-tls-verify: true',
          'users:',
          '- name: tester',
          '  user:',
          '    token: fake-token',
          '- name: stranger',
          '  user:',
          '    token: wrong-token',
          'contexts:',
          '- name: lab',
          '  context: {cluster: lab, user: tester}',
          '- name: other',
          '  context: {cluster: lab, user: stranger}',
          '',
        ].join('\n'),
      );
      // The agent container is the pod on node1: its exec is podman exec, as the kubelet would run it.
      api.apply('pods', {
        metadata: { name: 'clbprobe-node1', namespace: 'clbprobe', labels: { 'app.kubernetes.io/name': 'clbprobe' } },
        spec: { nodeName: LAB.node1Name, containers: [{ name: 'agent', image }] },
        status: {
          phase: 'Running',
          containerStatuses: [{ name: 'agent', ready: true, restartCount: 0, image, imageID: '', state: {} }],
        },
      });
      api.onExec = (call) => spawn('podman', ['exec', name, ...call.command], { stdio: ['ignore', 'pipe', 'pipe'] });
    });

    it('kubectl finds kubectl-clbprobe on PATH', async () => {
      const list = await run(['plugin', 'list']);
      expect(list.out).toContain(join(scratch, 'path', 'kubectl-clbprobe'));
      const help = await run(['clbprobe', 'evidence', '--help']);
      expect(help.code, help.err).toBe(0);
      expect(help.out).toContain('--context');
    });

    // --via exec: the exec fan-out (the default, through the evidence relay's Service, needs the relay running).
    it('`kubectl clbprobe evidence --all-nodes --service NS/NAME` with --kubeconfig and --context reaches the agent in the image', async () => {
      const r = await run([
        'clbprobe',
        'evidence',
        '--all-nodes',
        '--via',
        'exec',
        '--service',
        'lab/web',
        '--json',
        '--kubeconfig',
        kubeconfig,
        '--context',
        'lab',
      ]);
      expect(r.code, r.err + r.out).toBe(0);
      const lines = jsonLines<{ node: string; type: string; line?: string }>(r.out);
      expect(
        lines.some((l) => l.node === LAB.node1Name && l.type === 'entry' && l.line!.includes(`dst=${LAB.vip}`)),
      ).toBe(true);
      expect(api.execs.at(-1)).toMatchObject({ pod: 'clbprobe-node1', container: 'agent' });
    }, 90_000);

    it('--context and KUBECONFIG behave as in kubectl: current-context by default, an unknown context refused', async () => {
      const current = await run([
        'clbprobe',
        'evidence',
        '--all-nodes',
        '--via',
        'exec',
        '--service',
        'lab/web',
        '--kubeconfig',
        kubeconfig,
      ]);
      expect(current.code).not.toBe(0);
      expect(current.err).toMatch(/401 Unauthorized/);
      const fromEnv = await run(
        ['clbprobe', 'evidence', '--all-nodes', '--via', 'exec', '--service', 'lab/web', '--json', '--context', 'lab'],
        { KUBECONFIG: kubeconfig },
      );
      expect(fromEnv.code, fromEnv.err).toBe(0);
      const unknown = await run([
        'clbprobe',
        'evidence',
        '--all-nodes',
        '--via',
        'exec',
        '--service',
        'lab/web',
        '--kubeconfig',
        kubeconfig,
        '--context',
        'nosuch',
      ]);
      expect(unknown.code).not.toBe(0);
      expect(unknown.err).toContain('context "nosuch" does not exist');
    }, 90_000);
  });

  describe("under the engine's default seccomp profile (RuntimeDefault on podman and CRI-O)", () => {
    const name = `${PREFIX}agent-default`;
    beforeAll(async () => {
      stop(`${PREFIX}agent`); // the same node and port
      await startAgent(name, { ...agent, seccompProfile: { type: 'RuntimeDefault' } });
    }, 120_000);
    afterAll(() => stop(name));

    it('says that seccomp blocks bpf() and how to fix it, and counts with pcap meanwhile', async () => {
      const log = logs(name);
      expect(log).toMatch(/eBPF counters unavailable; falling back to pcap/);
      expect(log).toMatch(/blocked by seccomp: bpf\(\) returned EPERM although CAP_BPF is effective/);
      expect(log).toContain('deploy/seccomp/clbprobe.json');
      expect(log).toMatch(/"counter":"pcap/);
      // The capture source is up, degraded, with the seccomp block as its reason.
      const degraded = log
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => {
          try {
            return JSON.parse(l) as { msg?: string; source?: string; reason?: string };
          } catch {
            return {};
          }
        })
        .find((l) => l.msg === 'source up, degraded' && l.source === 'capture');
      expect(degraded?.reason, log).toMatch(/^counting with pcap .*blocked by seccomp/);
      // The conntrack event filter, the other eBPF program, says the same of itself.
      expect(log).toMatch(/"reason":"off: blocked by seccomp[^\n]*conntrack events filtered in user space only/);
      const s = parseSamples(await get('/metrics'));
      expect(find(s, 'clbprobe_source_up', { source: 'capture' })).toBe(1);
    });
  });
});
