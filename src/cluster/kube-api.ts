// The two API calls the watcher needs: a raw JSON list page, and a watch stream, over node's own
// http(s) with the target's TLS settings and credentials (kube-config.ts). Raw JSON on purpose:
// the builder reads the same shape as `kubectl get -o json`, not typed client models.
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { StringDecoder } from 'node:string_decoder';
import type { ApiTarget } from './kube-config.js';

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

export interface ListPage {
  resourceVersion: string;
  continueToken?: string;
  items: unknown[];
}

/**
 * Size bounds on what the API server sends. An object is at most ~1.5 MB in etcd (the API server
 * refuses bigger writes at 3 MB), so a watch event line past 4 MiB is not Kubernetes talking; a
 * list page of 500 such objects would not fit the agent's 256Mi anyway: past the bound the page
 * fails with a clear error (the reflector keeps its last good store and retries) instead of the
 * agent being OOM-killed.
 */
export interface ApiLimits {
  maxBodyBytes: number;
  maxEventBytes: number;
}
export const DEFAULT_API_LIMITS: ApiLimits = { maxBodyBytes: 64 << 20, maxEventBytes: 4 << 20 };

const mib = (n: number): string => `${+(n / 2 ** 20).toFixed(2)} MiB`;

export class KubeApi {
  readonly limits: ApiLimits;
  constructor(
    readonly target: ApiTarget,
    limits: Partial<ApiLimits> = {},
  ) {
    this.limits = { ...DEFAULT_API_LIMITS, ...limits };
  }

  /** GET one page of a collection. */
  async listPage(path: string, query: Record<string, string>, timeoutMs = 30_000): Promise<ListPage> {
    const { status, body } = await this.get(path, query, timeoutMs);
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
   * A connection that stays silent for longer than the server's own watch timeout
   * (query.timeoutSeconds, else 5 min) plus 30 s is taken as broken.
   */
  async watch(
    path: string,
    query: Record<string, string>,
    onEvent: (type: string, object: unknown) => void,
    onEnd: (err?: ApiError) => void,
  ): Promise<() => void> {
    const idleMs = (Number(query.timeoutSeconds) || 300) * 1000 + 30_000;
    const req = await this.open(path, { ...query, watch: 'true' }, idleMs);
    const res = await answer(req, `watch ${path}`);
    if (res.statusCode !== 200) {
      const body = await readBody(res, `watch ${path}`, this.limits.maxBodyBytes);
      throw new ApiError(`watch ${path}: ${statusText(res.statusCode ?? 0, body)}`, res.statusCode);
    }
    let ended = false;
    const end = (err?: ApiError): void => {
      if (ended) return;
      ended = true;
      req.destroy();
      onEnd(err);
    };
    // One JSON event per line; a line can span many chunks (a big EndpointSlice), up to maxEventBytes.
    const maxLine = this.limits.maxEventBytes;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    res.on('data', (chunk: Buffer) => {
      let from = 0;
      for (let nl = chunk.indexOf(10); nl >= 0 && !ended; nl = chunk.indexOf(10, from)) {
        pending.push(chunk.subarray(from, nl));
        pendingBytes += nl - from;
        if (pendingBytes > maxLine) return end(new ApiError(`watch ${path}: an event line is longer than ${mib(maxLine)}`));
        const line = Buffer.concat(pending).toString('utf8');
        pending = [];
        pendingBytes = 0;
        from = nl + 1;
        const event = parseWatchLine(line);
        if (event === undefined) continue;
        if (typeof event === 'string') return end(new ApiError(`watch ${path}: ${event}`));
        try {
          onEvent(event.type, event.object);
        } catch (e) {
          // One event the consumer cannot take ends this watch with its reason (then relist/resume),
          // never the process.
          return end(new ApiError(`watch ${path}: a ${event.type} event could not be applied: ${e instanceof Error ? e.message : String(e)}`));
        }
      }
      if (ended || from >= chunk.length) return;
      pending.push(chunk.subarray(from));
      pendingBytes += chunk.length - from;
      // A line that never ends is cut here, not buffered until the heap runs out.
      if (pendingBytes > maxLine) end(new ApiError(`watch ${path}: an event line is longer than ${mib(maxLine)} (no newline yet)`));
    });
    res.on('end', () => end(undefined));
    res.on('error', (e) => end(new ApiError(`watch ${path}: ${lostText(e)}`)));
    // After the answer, a reset or a silent connection shows up on the request or the socket.
    req.on('error', (e) => end(new ApiError(`watch ${path}: ${lostText(e)}`)));
    res.on('close', () => end(res.complete ? undefined : new ApiError(`watch ${path}: connection to the API server lost`)));
    return () => end(undefined);
  }

  private async open(path: string, query: Record<string, string>, idleMs: number): Promise<ClientRequest> {
    const url = new URL(this.target.server + path);
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
    const base = await this.target.requestOptions();
    const opts: RequestOptions = { ...base, method: 'GET', headers: { ...base.headers, accept: 'application/json' } };
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, opts);
    req.setTimeout(idleMs, () => req.destroy(new Error(`no data from the API server in ${Math.round(idleMs / 1000)} s`)));
    // Keepalive probes find a peer that vanished without a word (node rebooted, NAT entry gone).
    req.on('socket', (s) => s.setKeepAlive(true, 30_000));
    req.end();
    return req;
  }

  private async get(path: string, query: Record<string, string>, timeoutMs: number): Promise<{ status: number; body: string }> {
    const req = await this.open(path, query, timeoutMs);
    const res = await answer(req, `GET ${path}`);
    return { status: res.statusCode ?? 0, body: await readBody(res, `GET ${path}`, this.limits.maxBodyBytes) };
  }
}

/** The response's head, or an ApiError naming the transport failure. */
function answer(req: ClientRequest, what: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    req.once('response', resolve);
    req.once('error', (e) => reject(new ApiError(`${what}: ${transportText(e)}`)));
  });
}

/**
 * The whole body as text. Each piece is decoded as it arrives (the decoder keeps a character
 * split between pieces), so the socket's buffers are let go at once: holding them until the end,
 * then copying them into one Buffer, put ~2x a list page (2.2 MB at 500 Services with
 * managedFields) per listing collection in the C heap, whose pages the process then kept.
 */
function readBody(res: IncomingMessage, what: string, maxBytes: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const tooBig = (): void => {
      reject(new ApiError(`${what}: the answer is larger than ${mib(maxBytes)}`));
      res.destroy();
    };
    const declared = Number(res.headers['content-length']);
    if (declared > maxBytes) return tooBig();
    const pieces: string[] = [];
    const decoder = new StringDecoder('utf8');
    let bytes = 0;
    res.on('data', (piece: Buffer) => {
      bytes += piece.length;
      if (bytes > maxBytes) return tooBig();
      pieces.push(decoder.write(piece));
    });
    res.on('end', () => resolve(pieces.join('') + decoder.end()));
    res.on('error', (e) => reject(new ApiError(`${what}: ${lostText(e)}`)));
    res.on('close', () => {
      if (!res.complete) reject(new ApiError(`${what}: connection to the API server lost`));
    });
  });
}

/** A connection that broke after the answer began: node says "aborted" (ECONNRESET). */
function lostText(e: Error): string {
  const code = (e as NodeJS.ErrnoException).code;
  return e.message === 'aborted' || code === 'ECONNRESET' || code === 'EPIPE' ? `connection to the API server lost${code ? ` (${code})` : ''}` : transportText(e);
}

/** "connect ECONNREFUSED 10.0.0.1:443", TLS errors with their code ("... (UNABLE_TO_VERIFY_LEAF_SIGNATURE)"). */
function transportText(e: Error): string {
  const code = (e as NodeJS.ErrnoException).code;
  return code && !e.message.includes(code) ? `${e.message} (${code})` : e.message;
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

/**
 * One line of a watch stream: the event, undefined for a blank line, or why the line is not an
 * event (text for the error). Exported for the fuzz harness.
 */
export function parseWatchLine(line: string): { type: string; object: unknown } | undefined | string {
  if (line.trim() === '') return undefined;
  let event: unknown;
  try {
    event = JSON.parse(line);
  } catch {
    return `an event is not JSON (${line.slice(0, 80)})`;
  }
  const type = (event as { type?: unknown } | null)?.type;
  if (typeof type !== 'string') return `an event has no type (${line.slice(0, 80)})`;
  return { type, object: (event as { object?: unknown }).object };
}
