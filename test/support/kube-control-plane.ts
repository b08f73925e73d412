// A real Kubernetes control plane for tests: Debian's etcd 3.4 and kube-apiserver v1.20.2 built
// from Debian's source by scripts/setup-kube.sh, both on 127.0.0.1 only (NETWORK SAFETY RULE),
// TLS from a throwaway openssl CA, users from a static token file, RBAC on
// (--authorization-mode=Node,RBAC: 1.20.2 ignores --insecure-port, so there is no unauthenticated way in).
// No controller-manager, scheduler or kubelet: the tests create every object themselves through
// the API (EndpointSlices included), and a Service's LB address through its status subresource.
// startControlPlane() is idempotent: a second call in the same process returns the running one.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, sleep } from './wait.js';

export const KUBE_CACHE = process.env.KUBE_CACHE ?? '/var/cache/clbprobe-kube';
export const KUBE_BIN = join(KUBE_CACHE, 'bin');
export const SERVICE_CIDR = '10.96.0.0/16';

/** The identities in the static token file. */
export const USERS = {
  admin: { user: 'admin', groups: ['system:masters'] },
  /** What RBAC matches to deploy/rbac.yaml's ServiceAccount binding. */
  clbprobe: {
    user: 'system:serviceaccount:clbprobe:clbprobe',
    groups: ['system:serviceaccounts', 'system:serviceaccounts:clbprobe', 'system:authenticated'],
  },
  /** Bound to system:node-proxier by the API server's bootstrap policy, as kubeadm's kube-proxy is. */
  kubeProxy: { user: 'system:kube-proxy', groups: ['system:authenticated'] },
  /** Authenticated, no bindings at all. */
  nobody: { user: 'nobody', groups: ['system:authenticated'] },
} as const;
export type UserName = keyof typeof USERS;

export interface ApiAnswer {
  status: number;
  /** Parsed JSON when the body is JSON, else the text. */
  body: unknown;
}

export interface ControlPlane {
  /** https://127.0.0.1:PORT */
  readonly server: string;
  readonly port: number;
  readonly dir: string;
  readonly caFile: string;
  token(user: UserName): string;
  /** A kubeconfig file for `user` (server defaults to this.server). */
  kubeconfig(user: UserName, server?: string): string;
  /** One API request as `user` (admin by default). */
  request(method: string, path: string, body?: unknown, user?: UserName): Promise<ApiAnswer>;
  /** POST, failing unless 201/200; returns the created object. */
  create(path: string, object: unknown): Promise<Record<string, unknown>>;
  /** kubectl 1.20 (the one from kubernetes-client) as admin; throws with its stderr. */
  kubectl(args: string[], input?: string): string;
  /** Stops kube-apiserver only (etcd keeps the data) and starts it again on the same port. */
  restartApiServer(downMs?: number): Promise<void>;
  stopApiServer(): Promise<void>;
  startApiServer(): Promise<void>;
  /** etcd's client URL (http://127.0.0.1:PORT; its v3 JSON gateway answers under /v3/). */
  readonly etcdUrl: string;
  /** The API server's audit log so far (level Metadata, stage ResponseComplete): who asked what, and the answer. */
  audit(): AuditEvent[];
  /** Stops everything and removes the directory; idempotent. */
  stop(): Promise<void>;
}

/** One audit.k8s.io/v1 Event, the fields the tests read. */
export interface AuditEvent {
  verb: string;
  requestURI: string;
  user: { username: string };
  responseStatus?: { code?: number };
  stageTimestamp: string;
}

let running: Promise<ControlPlane> | undefined;

/** Starts etcd + kube-apiserver once per process (later calls get the same one). */
export function startControlPlane(): Promise<ControlPlane> {
  running ??= launchRetryingPorts().catch((e: unknown) => {
    running = undefined;
    throw e;
  });
  return running;
}

/**
 * launch(), again with new ports when etcd or the API server lost its port: freePort() hands out a
 * port that was free a moment ago, and another test's connection can take it before the child
 * binds it (seen in CI: etcd's "bind: address already in use").
 */
async function launchRetryingPorts(): Promise<ControlPlane> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await launch();
    } catch (e) {
      if (attempt >= 3 || !String(e instanceof Error ? e.message : e).includes('address already in use')) throw e;
    }
  }
}

export function binary(name: string): string {
  const path = join(KUBE_BIN, name);
  if (!existsSync(path))
    throw new Error(`${path} missing: run scripts/setup-kube.sh (sudo) to build the Kubernetes pieces`);
  return path;
}

/** Runs openssl in `dir`; throws with its stderr when it fails. */
export function openssl(dir: string, ...args: string[]): void {
  const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
}

/** Writes a two-day test CA (ca.crt, ca.key) and the API server's serving certificate for `sans` into `dir`. */
export function makeApiServerCerts(dir: string, caName: string, sans: readonly string[]): void {
  const key = ['-newkey', 'rsa:2048', '-nodes'];
  openssl(dir, 'req', '-x509', ...key, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', `/CN=${caName}`);
  openssl(dir, 'req', ...key, '-keyout', 'apiserver.key', '-out', 'apiserver.csr', '-subj', '/CN=kube-apiserver');
  writeFileSync(join(dir, 'san.ext'), `subjectAltName=${sans.join(',')}\n`);
  const signed = ['-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'apiserver.crt', '-days', '2'];
  openssl(dir, 'x509', '-req', '-in', 'apiserver.csr', ...signed, '-extfile', 'san.ext');
}

/** A CA, the API server's certificate (127.0.0.1) and the service account signing key pair. */
function makePki(dir: string): void {
  makeApiServerCerts(dir, 'clbprobe-test-ca', [
    'IP:127.0.0.1',
    'DNS:localhost',
    'DNS:kubernetes.default.svc',
    'IP:10.96.0.1',
  ]);
  openssl(dir, 'genrsa', '-out', 'sa.key', '2048');
  openssl(dir, 'rsa', '-in', 'sa.key', '-pubout', '-out', 'sa.pub');
}

/** Kills a child: SIGTERM, then SIGKILL after `graceMs`; resolves when it exited. */
function kill(p: ChildProcess | undefined, graceMs = 5000): Promise<void> {
  if (!p || p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => p.kill('SIGKILL'), graceMs);
    p.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
    p.kill('SIGTERM');
  });
}

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
});

function start(cmd: string, args: string[], log: string): ChildProcess {
  const fd = openSync(log, 'a');
  const p = spawn(cmd, args, { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  children.add(p);
  p.once('exit', () => children.delete(p));
  return p;
}

function tail(file: string, lines = 25): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

async function launch(): Promise<ControlPlane> {
  const etcdBin = binary('etcd');
  const apiserverBin = binary('kube-apiserver');
  const kubectlBin = binary('kubectl');
  const dir = mkdtempSync(join(tmpdir(), 'cbk-cp-'));
  // etcd fsyncs every write: on tmpfs that costs nothing (the data dies with the test anyway).
  const dataDir = existsSync('/dev/shm') ? mkdtempSync('/dev/shm/cbk-etcd-') : join(dir, 'etcd');
  mkdirSync(dataDir, { recursive: true });
  makePki(dir);
  const tokens = Object.fromEntries(
    Object.keys(USERS).map((u) => [u, `cbk-${u}-${Math.random().toString(36).slice(2)}`]),
  ) as Record<UserName, string>;
  writeFileSync(
    join(dir, 'tokens.csv'),
    `${Object.entries(USERS)
      .map(([name, u]) => `${tokens[name as UserName]},${u.user},uid-${name},"${u.groups.join(',')}"`)
      .join('\n')}\n`,
  );
  writeFileSync(
    join(dir, 'audit-policy.yaml'),
    'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n',
  );
  const ca = readFileSync(join(dir, 'ca.crt'));
  const [etcdPort, peerPort, port] = [await freePort(), await freePort(), await freePort()];
  const server = `https://127.0.0.1:${port}`;

  const etcd = start(
    etcdBin,
    [
      '--name',
      'cbk',
      '--data-dir',
      dataDir,
      '--listen-client-urls',
      `http://127.0.0.1:${etcdPort}`,
      '--advertise-client-urls',
      `http://127.0.0.1:${etcdPort}`,
      '--listen-peer-urls',
      `http://127.0.0.1:${peerPort}`,
      '--initial-advertise-peer-urls',
      `http://127.0.0.1:${peerPort}`,
      '--initial-cluster',
      `cbk=http://127.0.0.1:${peerPort}`,
      '--log-level',
      'warn',
    ],
    join(dir, 'etcd.log'),
  );

  const apiserverArgs = [
    `--etcd-servers=http://127.0.0.1:${etcdPort}`,
    '--bind-address=127.0.0.1',
    `--secure-port=${port}`,
    '--advertise-address=127.0.0.1',
    `--tls-cert-file=${dir}/apiserver.crt`,
    `--tls-private-key-file=${dir}/apiserver.key`,
    `--client-ca-file=${dir}/ca.crt`,
    `--token-auth-file=${dir}/tokens.csv`,
    '--authorization-mode=Node,RBAC',
    `--service-account-key-file=${dir}/sa.pub`,
    `--service-account-signing-key-file=${dir}/sa.key`,
    '--service-account-issuer=https://kubernetes.default.svc',
    '--api-audiences=https://kubernetes.default.svc',
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    '--service-node-port-range=30000-32767',
    // The "kubernetes" Service's endpoints would be 127.0.0.1, which the API rejects (loopback) every 10 s.
    '--endpoint-reconciler-type=none',
    // Every request with its user and answer, so a test can see what a client really asked (a relist, a watch's resourceVersion).
    `--audit-policy-file=${dir}/audit-policy.yaml`,
    `--audit-log-path=${dir}/audit.log`,
    '--audit-log-mode=blocking',
    `--cert-dir=${dir}/certs`,
    '--profiling=false',
    '--v=1',
  ];
  let apiserver: ChildProcess | undefined;
  const apiLog = join(dir, 'kube-apiserver.log');

  const doRequest = (
    method: string,
    path: string,
    body: unknown,
    user: UserName,
    timeoutMs = 15_000,
  ): Promise<ApiAnswer> =>
    new Promise((resolve, reject) => {
      const data = body === undefined ? undefined : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
      const req = request(
        server + path,
        {
          method,
          ca,
          headers: {
            authorization: `Bearer ${tokens[user]}`,
            accept: 'application/json',
            ...(data
              ? {
                  'content-type': method === 'PATCH' ? 'application/merge-patch+json' : 'application/json',
                  'content-length': data.length,
                }
              : {}),
          },
          timeout: timeoutMs,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              // not JSON (e.g. /readyz)
            }
            resolve({ status: res.statusCode ?? 0, body: parsed });
          });
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer in ${timeoutMs} ms`)));
      req.on('error', reject);
      req.end(data);
    });

  const startApiServer = async (): Promise<void> => {
    // A process killed by a signal has exitCode null too: only one with neither is still running.
    if (apiserver && apiserver.exitCode === null && apiserver.signalCode === null) return;
    const p = start(apiserverBin, apiserverArgs, apiLog);
    apiserver = p;
    // A loaded 2-core machine has taken ~20 s for the first start (bootstrap RBAC policy, CRD informers).
    const end = Date.now() + 120_000;
    for (;;) {
      if (p.exitCode !== null) throw new Error(`kube-apiserver exited ${p.exitCode}:\n${tail(apiLog)}`);
      const r = await doRequest('GET', '/readyz', undefined, 'admin', 5000).catch(() => undefined);
      if (r?.status === 200) return;
      if (Date.now() > end)
        throw new Error(
          `kube-apiserver not ready after 120 s (last: ${r ? `${r.status} ${String(r.body).slice(-300)}` : 'no answer'}):\n${tail(apiLog)}`,
        );
      await sleep(250);
    }
  };

  const stopApiServer = async (): Promise<void> => {
    await kill(apiserver);
  };

  const kubeconfigs = new Map<string, string>();
  const kubeconfig = (user: UserName, at = server): string => {
    const key = `${user} ${at}`;
    const existing = kubeconfigs.get(key);
    if (existing) return existing;
    const file = join(dir, `kubeconfig-${user}-${kubeconfigs.size}`);
    writeFileSync(
      file,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters:',
        '- name: cbk',
        '  cluster:',
        `    server: ${at}`,
        `    certificate-authority: ${join(dir, 'ca.crt')}`,
        'users:',
        `- name: ${user}`,
        '  user:',
        `    token: ${tokens[user]}`,
        'contexts:',
        '- name: cbk',
        '  context:',
        '    cluster: cbk',
        `    user: ${user}`,
        'current-context: cbk',
        '',
      ].join('\n'),
    );
    kubeconfigs.set(key, file);
    return file;
  };

  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    running = undefined;
    await kill(apiserver);
    await kill(etcd);
    rmSync(dataDir, { recursive: true, force: true });
    if (!process.env.CBK_KEEP) rmSync(dir, { recursive: true, force: true });
  };

  try {
    await startApiServer();
  } catch (e) {
    const etcdLog = tail(join(dir, 'etcd.log'), 10);
    // stop() forgets the running control plane; this launch failing is startControlPlane's to handle
    // (it may be retrying, with `running` already its promise).
    const launching = running;
    await stop().catch(() => undefined);
    running = launching;
    throw new Error(`${e instanceof Error ? e.message : String(e)}\netcd:\n${etcdLog}`);
  }

  return {
    server,
    port,
    dir,
    caFile: join(dir, 'ca.crt'),
    etcdUrl: `http://127.0.0.1:${etcdPort}`,
    audit() {
      let text = '';
      try {
        text = readFileSync(join(dir, 'audit.log'), 'utf8');
      } catch {
        return [];
      }
      return text
        .split('\n')
        .filter((l) => l.includes('"stage":"ResponseComplete"'))
        .map((l) => JSON.parse(l) as AuditEvent);
    },
    token: (user) => tokens[user],
    kubeconfig,
    request: (method, path, body, user = 'admin') => doRequest(method, path, body, user),
    async create(path, object) {
      const r = await doRequest('POST', path, object, 'admin');
      if (r.status !== 201 && r.status !== 200)
        throw new Error(`POST ${path}: ${r.status} ${JSON.stringify(r.body).slice(0, 400)}`);
      return r.body as Record<string, unknown>;
    },
    kubectl(args, input) {
      const r = spawnSync(kubectlBin, ['--kubeconfig', kubeconfig('admin'), ...args], {
        encoding: 'utf8',
        input,
        timeout: 60_000,
      });
      if (r.status !== 0) throw new Error(`kubectl ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
      return r.stdout;
    },
    async restartApiServer(downMs = 0) {
      await stopApiServer();
      await sleep(downMs);
      await startApiServer();
    },
    stopApiServer,
    startApiServer,
    stop,
  };
}

/** A service-account JWT from the real TokenRequest API (what the kubelet mounts into a pod), for `audiences` or the API server's own. */
export async function serviceAccountToken(
  cp: ControlPlane,
  ns: string,
  name: string,
  audiences?: string[],
): Promise<string> {
  const r = await cp.request('POST', `/api/v1/namespaces/${ns}/serviceaccounts/${name}/token`, {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'TokenRequest',
    spec: { expirationSeconds: 3600, ...(audiences ? { audiences } : {}) },
  });
  if (r.status !== 201)
    throw new Error(`TokenRequest ${ns}/${name}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
  return (r.body as { status: { token: string } }).status.token;
}

/** A kubeconfig file at `file` that sends `token` to `server` (the API server by default). */
export function tokenKubeconfig(cp: ControlPlane, file: string, token: string, server = cp.server): string {
  // client-node sends a token over plain HTTP (a loopback proxy hop) only with TLS checks off.
  const ca = server.startsWith('https')
    ? `    certificate-authority: ${cp.caFile}`
    : '    insecure-skip-tls-verify: true';
  writeFileSync(
    file,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: c',
      '  cluster:',
      `    server: ${server}`,
      ca,
      'users:',
      '- name: u',
      '  user:',
      `    token: ${token}`,
      'contexts:',
      '- name: c',
      '  context: {cluster: c, user: u}',
      'current-context: c',
      '',
    ].join('\n'),
  );
  return file;
}
