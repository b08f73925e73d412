// Where the Kubernetes API is and how to authenticate to it, without @kubernetes/client-node:
// loading that package costs ~26 MB of heap and ~70 MB of RSS (its generated models load with
// its config module), more than the whole agent at 5,000 Services (bench/agent.ts). What the
// agent meets in practice is read here: the in-cluster service account (the DaemonSet), and
// kubeconfigs with static credentials (tokens, token files, client certificates, basic auth).
// Kubeconfigs whose user runs an exec plugin or an auth-provider, or whose cluster needs a proxy,
// are handed to client-node (loaded then, and only then).
import type { RequestOptions } from 'node:https';
import { dirname, resolve } from 'node:path';
import yaml from 'js-yaml';
import { FileTooLargeError, readFileBounded } from '../read-bounded.js';

/** The service account files every pod gets (projected, the token rotated by the kubelet). */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface ApiTarget {
  /** The API server's base URL, without a trailing slash. */
  readonly server: string;
  /** What this target is, for messages: "in-cluster service account" or "kubeconfig F (context C)". */
  readonly source: string;
  /** TLS settings and headers for one request; token files are read again each time (they rotate). */
  requestOptions(): Promise<RequestOptions>;
}

export class KubeConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KubeConfigError';
  }
}

/**
 * In-cluster config when running in a pod, else the given kubeconfig file. Throws a
 * KubeConfigError that names the file and field at fault.
 */
export function loadApiTarget(
  kubeconfigPath?: string,
  env: NodeJS.ProcessEnv = process.env,
  serviceAccountDir = SERVICE_ACCOUNT_DIR,
): ApiTarget {
  if (kubeconfigPath) return fromKubeconfig(kubeconfigPath);
  if (env.KUBERNETES_SERVICE_HOST) return inCluster(env, serviceAccountDir);
  throw new KubeConfigError(
    'not running in a pod (KUBERNETES_SERVICE_HOST is unset): pass --kubeconfig FILE, or --cluster-file FILE',
  );
}

/**
 * Bounds on the files read here. A kubeconfig is a few KB (kubectl's with dozens of clusters and
 * embedded certificates stay far below 4 MiB). A token travels in an HTTP header, and the API
 * server (Go's net/http) takes at most 1 MiB of headers. Certificate and key files are PEM: the
 * whole Mozilla CA bundle is ~220 KB.
 */
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

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function fromKubeconfig(path: string): ApiTarget {
  const where = `kubeconfig ${path}`;
  let doc: unknown;
  try {
    doc = yaml.load(readFile(path, 'kubeconfig', MAX_KUBECONFIG_BYTES).toString());
  } catch (e) {
    if (e instanceof KubeConfigError) throw e;
    throw new KubeConfigError(`${where}: not YAML: ${e instanceof Error ? e.message.split('\n')[0] : String(e)}`);
  }
  if (!isObj(doc)) throw new KubeConfigError(`${where}: not a kubeconfig (expected a mapping)`);
  const contextName = doc['current-context'];
  if (typeof contextName !== 'string' || !contextName) throw new KubeConfigError(`${where}: no current-context`);
  const named = (list: string, name: unknown, field: string): Obj => {
    const entries = Array.isArray(doc[list]) ? (doc[list] as unknown[]) : [];
    const entry = entries.find((x) => isObj(x) && x.name === name);
    if (!isObj(entry)) throw new KubeConfigError(`${where}: ${list} has no entry named ${JSON.stringify(name)}`);
    const body = entry[field] ?? {}; // "user:" with nothing under it is an empty user
    if (!isObj(body))
      throw new KubeConfigError(`${where}: ${list} entry ${JSON.stringify(name)} has no ${field} mapping`);
    return body;
  };
  const context = named('contexts', contextName, 'context');
  const cluster = named('clusters', context.cluster, 'cluster');
  // A context may have no user (an unauthenticated, e.g. kubectl proxy, endpoint).
  const user = context.user === undefined ? {} : named('users', context.user, 'user');
  const at = `${where} (context ${contextName})`;
  const server = cluster.server;
  if (typeof server !== 'string' || !/^https?:\/\/./.test(server))
    throw new KubeConfigError(`${at}: cluster.server is not an http(s) URL`);

  if (user.exec !== undefined || user['auth-provider'] !== undefined || cluster['proxy-url'] !== undefined) {
    return clientNodeTarget(path, server.replace(/\/+$/, ''), at);
  }

  const base = dirname(resolve(path));
  const str = (o: Obj, k: string): string | undefined => {
    const v = o[k];
    if (v === undefined || v === null || v === '') return undefined;
    if (typeof v !== 'string') throw new KubeConfigError(`${at}: ${k} is not a string`);
    return v;
  };
  // "-data" fields are base64; the others are paths, relative to the kubeconfig's directory.
  const material = (o: Obj, k: string, what: string): Buffer | undefined => {
    const data = str(o, `${k}-data`);
    if (data !== undefined) return Buffer.from(data, 'base64');
    const file = str(o, k);
    return file === undefined ? undefined : readFile(resolve(base, file), `${what} (${k})`, MAX_CERTIFICATE_BYTES);
  };
  const tls: RequestOptions = {};
  const ca = material(cluster, 'certificate-authority', 'the cluster CA');
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
  return {
    server: server.replace(/\/+$/, ''),
    source: at,
    requestOptions: async () => {
      const auth = authorization();
      return { ...tls, headers: auth ? { authorization: auth } : {} };
    },
  };
}

/** Exec plugins, auth-providers and proxies: client-node's KubeConfig does the work. */
function clientNodeTarget(path: string, server: string, source: string): ApiTarget {
  let kc: Promise<import('@kubernetes/client-node').KubeConfig> | undefined;
  const load = async () => {
    const { KubeConfig } = await import('@kubernetes/client-node');
    const k = new KubeConfig();
    try {
      k.loadFromFile(path);
    } catch (e) {
      throw new KubeConfigError(`cannot load kubeconfig ${path}: ${e instanceof Error ? e.message : String(e)}`);
    }
    return k;
  };
  return {
    server,
    source: `${source}, credentials through @kubernetes/client-node`,
    requestOptions: async () => {
      const opts: RequestOptions = { headers: {} };
      await (kc ??= load()).then((k) => k.applyToHTTPSOptions(opts));
      return opts;
    },
  };
}
