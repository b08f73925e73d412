// Where the API is and how to authenticate: in-cluster service account, or kubeconfig (static or exec plugin).
// Node commands use loadApiTarget; workstation commands find their kubeconfig as kubectl does (loadWorkstationTarget).
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { RequestOptions } from 'node:https';
import { homedir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import yaml from 'js-yaml';
import { FileTooLargeError, readFileBounded } from '../read-bounded.js';
import { isObj, type Obj } from './fields.js';

const execFileAsync = promisify(execFile);

/** The service account files every pod gets (projected, the token rotated by the kubelet). */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface ApiTarget {
  /** The API server's base URL, without a trailing slash. */
  readonly server: string;
  /** What this target is, for messages: "in-cluster service account" or "kubeconfig F (context C)". */
  readonly source: string;
  /** TLS settings and headers for one request; token files are read again each time (they rotate). */
  requestOptions(): Promise<RequestOptions>;
  /**
   * The API server answered 401 to a request made with `options`: drops the plugin credential they carry if it is
   * still the one held; true when they carried one, so that a retry (one, as client-go does) gets another.
   */
  refused?(options: RequestOptions): boolean;
}

export class KubeConfigError extends Error {
  override readonly name = 'KubeConfigError';
}

/** In-cluster config in a pod, else the given kubeconfig; throws KubeConfigError naming file and field. */
export function loadApiTarget(
  kubeconfigPath?: string,
  env: NodeJS.ProcessEnv = process.env,
  serviceAccountDir = SERVICE_ACCOUNT_DIR,
): ApiTarget {
  if (kubeconfigPath) return fromKubeconfig([kubeconfigPath]);
  if (env.KUBERNETES_SERVICE_HOST) return inCluster(env, serviceAccountDir);
  throw new KubeConfigError(
    'not running in a pod (KUBERNETES_SERVICE_HOST is unset): pass --kubeconfig FILE, or --cluster-file FILE',
  );
}

/** As kubectl: the given file, else KUBECONFIG (first of each name wins), else ~/.kube/config, else in-cluster. */
export function loadWorkstationTarget(
  file?: string,
  context?: string,
  env: NodeJS.ProcessEnv = process.env,
  serviceAccountDir = SERVICE_ACCOUNT_DIR,
): ApiTarget {
  const home = join(env.HOME ?? homedir(), '.kube', 'config');
  const candidates = file ? [file] : env.KUBECONFIG ? env.KUBECONFIG.split(delimiter) : [home];
  const paths = file ? candidates : candidates.filter((path) => path && existsSync(path));
  if (paths.length) return fromKubeconfig(paths, context);
  if (env.KUBERNETES_SERVICE_HOST) return inCluster(env, serviceAccountDir);
  throw new KubeConfigError(
    'no kubeconfig: set KUBECONFIG, create ~/.kube/config, run in a pod, or pass --kubeconfig FILE',
  );
}

/** File bounds: kubeconfigs are KBs, API servers (Go net/http) take at most 1 MiB of headers, PEM bundles are small. */
export const MAX_KUBECONFIG_BYTES = 4 << 20;
export const MAX_TOKEN_BYTES = 1 << 20;
export const MAX_CERTIFICATE_BYTES = 4 << 20;

function readFile(path: string, what: string, maxBytes: number): Buffer {
  try {
    return readFileBounded(path, maxBytes, what);
  } catch (e) {
    if (e instanceof FileTooLargeError) throw new KubeConfigError(e.message);
    throw new KubeConfigError(`cannot read ${what} ${path}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
  }
}

/** As client-go's rest.InClusterConfig: KUBERNETES_SERVICE_HOST/PORT, the account's token and CA. */
function inCluster(env: NodeJS.ProcessEnv, dir: string): ApiTarget {
  const host = env.KUBERNETES_SERVICE_HOST!;
  const port = env.KUBERNETES_SERVICE_PORT || '443';
  if (!/^\d{1,5}$/.test(port))
    throw new KubeConfigError(`KUBERNETES_SERVICE_PORT is not a port: ${JSON.stringify(port)}`);
  const tokenFile = `${dir}/token`;
  const ca = readFile(`${dir}/ca.crt`, 'the service account CA', MAX_CERTIFICATE_BYTES);
  const token = () => {
    const t = readFile(tokenFile, 'the service account token', MAX_TOKEN_BYTES).toString().trim();
    if (!t) throw new KubeConfigError(`the service account token ${tokenFile} is empty`);
    return t;
  };
  token(); // fail at start-up, not at the first request
  return {
    server: `https://${host.includes(':') ? `[${host}]` : host}:${port}`,
    source: 'in-cluster service account',
    requestOptions: async () => ({ ca, headers: { authorization: `Bearer ${token()}` } }),
  };
}

function readKubeconfig(path: string): Obj {
  let doc: unknown;
  try {
    doc = yaml.load(readFile(path, 'kubeconfig', MAX_KUBECONFIG_BYTES).toString());
  } catch (e) {
    if (e instanceof KubeConfigError) throw e;
    throw new KubeConfigError(
      `kubeconfig ${path}: not YAML: ${e instanceof Error ? e.message.split('\n')[0] : String(e)}`,
    );
  }
  if (!isObj(doc)) throw new KubeConfigError(`kubeconfig ${path}: not a kubeconfig (expected a mapping)`);
  return doc;
}

function fromKubeconfig(paths: string[], contextOverride?: string): ApiTarget {
  const files = paths.map((path) => ({ path, doc: readKubeconfig(path) }));
  const where = `kubeconfig ${paths.join(delimiter)}`;
  const current = files.map((f) => f.doc['current-context']).find((c) => typeof c === 'string' && c);
  const contextName = contextOverride ?? current;
  if (typeof contextName !== 'string' || !contextName) throw new KubeConfigError(`${where}: no current-context`);
  // An entry of a kubeconfig's list, with the directory its relative paths start from (its file's).
  const named = (list: string, name: unknown, field: string): { body: Obj; base: string } => {
    for (const { path, doc } of files) {
      const entries = Array.isArray(doc[list]) ? (doc[list] as unknown[]) : [];
      const entry = entries.find((x) => isObj(x) && x.name === name);
      if (!isObj(entry)) continue;
      const body = entry[field] ?? {}; // "user:" with nothing under it is an empty user
      if (!isObj(body))
        throw new KubeConfigError(`${where}: ${list} entry ${JSON.stringify(name)} has no ${field} mapping`);
      return { body, base: dirname(resolve(path)) };
    }
    // kubectl's words for a --context that is not there.
    if (list === 'contexts' && contextOverride !== undefined)
      throw new KubeConfigError(`context "${contextOverride}" does not exist`);
    throw new KubeConfigError(`${where}: ${list} has no entry named ${JSON.stringify(name)}`);
  };
  const context = named('contexts', contextName, 'context').body;
  const { body: cluster, base: clusterBase } = named('clusters', context.cluster, 'cluster');
  // A context may have no user (an unauthenticated, e.g. kubectl proxy, endpoint).
  const { body: user, base } =
    context.user === undefined ? { body: {}, base: clusterBase } : named('users', context.user, 'user');
  const at = `${where} (context ${contextName})`;
  const server = cluster.server;
  if (typeof server !== 'string' || !/^https?:\/\/./.test(server))
    throw new KubeConfigError(`${at}: cluster.server is not an http(s) URL`);

  if (user['auth-provider'] !== undefined)
    throw new KubeConfigError(`${at}: user.auth-provider is not supported here: use an exec plugin or a token`);
  if (cluster['proxy-url'] !== undefined)
    throw new KubeConfigError(`${at}: cluster.proxy-url is not supported here: reach the API server directly`);

  const str = (o: Obj, k: string): string | undefined => {
    const v = o[k];
    if (v === undefined || v === null || v === '') return undefined;
    if (typeof v !== 'string') throw new KubeConfigError(`${at}: ${k} is not a string`);
    return v;
  };
  // "-data" fields are base64; the others are paths, relative to the directory of the entry's kubeconfig.
  const material = (o: Obj, k: string, what: string, from = base): Buffer | undefined => {
    const data = str(o, `${k}-data`);
    if (data !== undefined) return Buffer.from(data, 'base64');
    const file = str(o, k);
    return file === undefined ? undefined : readFile(resolve(from, file), `${what} (${k})`, MAX_CERTIFICATE_BYTES);
  };
  const tls: RequestOptions = {};
  const ca = material(cluster, 'certificate-authority', 'the cluster CA', clusterBase);
  if (ca) tls.ca = ca;
  if (cluster['insecure-skip-tls-verify'] === true) tls.rejectUnauthorized = false;
  const serverName = str(cluster, 'tls-server-name');
  if (serverName) tls.servername = serverName;
  const cert = material(user, 'client-certificate', 'the client certificate');
  const key = material(user, 'client-key', 'the client key');
  if (!cert !== !key) throw new KubeConfigError(`${at}: the user has a client certificate or a client key, not both`);
  if (cert) Object.assign(tls, { cert, key });

  const token = str(user, 'token');
  const tokenFile = str(user, 'tokenFile');
  const username = str(user, 'username');
  const password = str(user, 'password') ?? '';
  const authorization = (): string | undefined => {
    if (token) return `Bearer ${token}`;
    if (tokenFile)
      return `Bearer ${readFile(resolve(base, tokenFile), 'the token file', MAX_TOKEN_BYTES).toString().trim()}`;
    if (username) return `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
    return undefined;
  };
  authorization(); // a missing token file fails now
  const plugin = user.exec === undefined ? undefined : execPlugin(user.exec, base, at, { server, cluster, ca });
  // Which credential each handed-out options object carries, so that a 401 drops that one and no newer one.
  const carried = new WeakMap<RequestOptions, ExecCredential>();
  return {
    server: server.replace(/\/+$/, ''),
    source: plugin ? `${at}, credentials from its exec plugin` : at,
    requestOptions: async () => {
      const credential = await plugin?.get();
      const auth = credential?.token ? `Bearer ${credential.token}` : authorization();
      const options = { ...tls, ...credential?.tls, headers: auth ? { authorization: auth } : {} };
      if (credential) carried.set(options, credential);
      return options;
    },
    refused: (options) => {
      const credential = carried.get(options);
      if (credential) plugin?.drop(credential);
      return credential !== undefined;
    },
  };
}

/** What an exec plugin printed (an ExecCredential's status), and until when it holds. */
interface ExecCredential {
  token?: string;
  tls?: { cert: Buffer; key: Buffer };
  expiresMs: number;
}

/** A plugin that does not answer in this time is taken as broken (kubectl waits as long for none). */
const EXEC_PLUGIN_TIMEOUT_MS = 60_000;

/** An exec plugin's credential: `get` runs the plugin when none is held, `drop` forgets a refused one. */
interface ExecPlugin {
  get(): Promise<ExecCredential>;
  /** Forgets `credential` if it is still the one held, so that the next get() runs the plugin again. */
  drop(credential: ExecCredential): void;
}

/**
 * Runs the exec credential plugin as kubectl does without a terminal; its credential is held until its
 * expirationTimestamp or a 401, and one run serves every request made while it is in flight.
 */
function execPlugin(
  exec: unknown,
  base: string,
  at: string,
  target: { server: string; cluster: Obj; ca: Buffer | undefined },
): ExecPlugin {
  if (!isObj(exec) || typeof exec.command !== 'string' || !exec.command)
    throw new KubeConfigError(`${at}: user.exec has no command`);
  const apiVersion = typeof exec.apiVersion === 'string' ? exec.apiVersion : 'client.authentication.k8s.io/v1';
  const args = Array.isArray(exec.args) ? exec.args.map(String) : [];
  // As client-go: a command with a slash is relative to the kubeconfig's directory; a bare name is looked up on PATH.
  const command = exec.command.includes('/') ? resolve(base, exec.command) : exec.command;
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const e of Array.isArray(exec.env) ? exec.env : []) if (isObj(e)) env[String(e.name)] = String(e.value ?? '');
  // With provideClusterInfo, the plugin is told which cluster it answers for (ExecCredential spec.cluster).
  const clusterInfo =
    exec.provideClusterInfo === true
      ? {
          cluster: {
            server: target.server,
            'certificate-authority-data': target.ca?.toString('base64'),
            'tls-server-name': target.cluster['tls-server-name'],
            'insecure-skip-tls-verify': target.cluster['insecure-skip-tls-verify'],
          },
        }
      : {};
  env.KUBERNETES_EXEC_INFO = JSON.stringify({
    apiVersion,
    kind: 'ExecCredential',
    spec: { interactive: false, ...clusterInfo },
  });
  const what = `${at}: exec plugin ${command}`;
  const run = async (): Promise<ExecCredential> => {
    const options = { env, timeout: EXEC_PLUGIN_TIMEOUT_MS, maxBuffer: MAX_TOKEN_BYTES, encoding: 'utf8' } as const;
    const { stdout } = await execFileAsync(command, args, options).catch((e: Error & { stderr?: string }) => {
      throw new KubeConfigError(`${what}: ${e.stderr?.trim() || e.message}`);
    });
    return credentialOf(stdout, what);
  };
  // The run in flight, or the credential it gave; a failed run is forgotten so that the next request runs again.
  let held: { run: Promise<ExecCredential>; credential?: ExecCredential } | undefined;
  const start = (): Promise<ExecCredential> => {
    const entry: NonNullable<typeof held> = { run: run() };
    held = entry;
    entry.run.then(
      (credential) => (entry.credential = credential),
      () => {
        if (held === entry) held = undefined;
      },
    );
    return entry.run;
  };
  return {
    get: () => {
      const expired = held?.credential !== undefined && Date.now() >= held.credential.expiresMs;
      return held && !expired ? held.run : start();
    },
    drop: (credential) => {
      if (held?.credential === credential) held = undefined;
    },
  };
}

/** The credential in a plugin's ExecCredential JSON, or why it is none. */
function credentialOf(text: string, what: string): ExecCredential {
  let status: unknown;
  try {
    status = (JSON.parse(text) as { status?: unknown }).status;
  } catch {
    throw new KubeConfigError(`${what}: its output is not an ExecCredential (not JSON)`);
  }
  if (!isObj(status)) throw new KubeConfigError(`${what}: its ExecCredential has no status`);
  const expires = typeof status.expirationTimestamp === 'string' ? Date.parse(status.expirationTimestamp) : Number.NaN;
  const credential: ExecCredential = { expiresMs: Number.isNaN(expires) ? Number.POSITIVE_INFINITY : expires };
  if (typeof status.token === 'string' && status.token) credential.token = status.token;
  const { clientCertificateData: cert, clientKeyData: key } = status;
  if (typeof cert === 'string' && typeof key === 'string' && cert && key)
    credential.tls = { cert: Buffer.from(cert), key: Buffer.from(key) };
  if (!credential.token && !credential.tls)
    throw new KubeConfigError(`${what}: its ExecCredential has neither a token nor a client certificate and key`);
  return credential;
}
