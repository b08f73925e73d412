// The two API calls the watcher needs, on @kubernetes/client-node's config and
// auth (in-cluster service account, kubeconfig with certs, tokens or exec
// plugins): a raw JSON list page, and a watch stream. Raw JSON on purpose:
// the builder reads the same shape as `kubectl get -o json`, not the typed
// client models (which turn timestamps into Dates and rename fields).
import { request as httpRequest } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { KubeConfig, Watch } from '@kubernetes/client-node';

/** An API answer other than 200, or a transport failure (statusCode undefined). */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly statusCode?: number,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** In-cluster config when running in a pod, else the given kubeconfig file. Throws with a usable message. */
export function loadKubeConfig(kubeconfigPath?: string): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfigPath) {
    try {
      kc.loadFromFile(kubeconfigPath);
    } catch (e) {
      throw new Error(`cannot load kubeconfig ${kubeconfigPath}: ${e instanceof Error ? e.message : String(e)}`);
    }
  } else if (process.env.KUBERNETES_SERVICE_HOST) {
    kc.loadFromCluster();
  } else {
    throw new Error('not running in a pod (KUBERNETES_SERVICE_HOST is unset): pass --kubeconfig FILE, or --cluster-file FILE');
  }
  if (!kc.getCurrentCluster()) throw new Error(`kubeconfig ${kubeconfigPath ?? '(in-cluster)'} has no current cluster`);
  return kc;
}

export interface ListPage {
  resourceVersion: string;
  continueToken?: string;
  items: unknown[];
}

export class KubeApi {
  private readonly watcher: Watch;

  constructor(private readonly kc: KubeConfig) {
    this.watcher = new Watch(kc);
  }

  /** GET one page of a collection. */
  async listPage(path: string, query: Record<string, string>, timeoutMs = 30_000): Promise<ListPage> {
    const server = this.kc.getCurrentCluster()!.server;
    const url = new URL(server.replace(/\/$/, '') + path);
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
    const opts: RequestOptions = { method: 'GET', headers: {} };
    await this.kc.applyToHTTPSOptions(opts);
    opts.headers = { ...opts.headers, accept: 'application/json' };
    const { status, body } = await getText(url, opts, timeoutMs);
    if (status !== 200) throw new ApiError(`GET ${path}: ${statusText(status, body)}`, status);
    let list: { metadata?: { resourceVersion?: unknown; continue?: unknown }; items?: unknown };
    try {
      list = JSON.parse(body) as typeof list;
    } catch {
      throw new ApiError(`GET ${path}: the answer is not JSON (${body.slice(0, 80)})`);
    }
    if (!Array.isArray(list.items) || typeof list.metadata?.resourceVersion !== 'string') {
      throw new ApiError(`GET ${path}: the answer is not a list`);
    }
    const page: ListPage = { resourceVersion: list.metadata.resourceVersion, items: list.items };
    if (typeof list.metadata.continue === 'string' && list.metadata.continue !== '') page.continueToken = list.metadata.continue;
    return page;
  }

  /**
   * Opens a watch. Rejects if the server can't be reached or refuses it;
   * once it answered, `onEvent` gets each event and `onEnd` is called once,
   * when the stream ends (err undefined) or breaks. Resolves to a function
   * that closes the stream (then `onEnd` is called with no error).
   */
  async watch(
    path: string,
    query: Record<string, string>,
    onEvent: (type: string, object: unknown) => void,
    onEnd: (err?: ApiError) => void,
  ): Promise<() => void> {
    let open = false;
    let ended = false;
    let early: unknown;
    const end = (err: unknown): void => {
      if (ended) return;
      ended = true;
      if (open) onEnd(err ? toApiError(path, err) : undefined);
      else early = err;
    };
    const controller = await this.watcher.watch(path, query, (type, object) => onEvent(type, object), end);
    // client-node reports a failed connect through the done callback, before returning.
    if (ended) throw toApiError(path, early ?? new Error('closed before answering'));
    open = true;
    return () => {
      end(undefined);
      controller.abort();
    };
  }
}

function toApiError(path: string, err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const code = (err as { statusCode?: unknown }).statusCode;
  // node-fetch says "request to <url with query> failed, reason: connect ECONNREFUSED ..."; keep the reason.
  const raw = err instanceof Error ? err.message : String(err);
  const reason = /^request to \S+ failed, reason: (.*)$/.exec(raw)?.[1] ?? raw;
  const msg = reason === 'Premature close' ? 'connection to the API server lost' : reason;
  return new ApiError(`watch ${path}: ${typeof code === 'number' ? `${code} ` : ''}${msg}`, typeof code === 'number' ? code : undefined);
}

function statusText(status: number, body: string): string {
  try {
    const s = JSON.parse(body) as { message?: unknown; reason?: unknown };
    if (typeof s.message === 'string') return `${status} ${typeof s.reason === 'string' ? `${s.reason}: ` : ''}${s.message}`;
  } catch {
    // not a Status object
  }
  return `${status} ${body.slice(0, 120)}`;
}

function getText(url: URL, opts: RequestOptions, timeoutMs: number): Promise<{ status: number; body: string }> {
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(url, opts, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', (e) => reject(new ApiError(`GET ${url.pathname}: ${e.message}`)));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on('error', (e) => reject(new ApiError(`GET ${url.pathname}: ${e.message}`)));
    req.end();
  });
}
