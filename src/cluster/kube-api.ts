// A list page and a watch stream over node's http(s) with kube-config.ts credentials; raw JSON, as `kubectl -o json`,
// read as streams that keep only what the view reads (json-reduce.ts).
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { StringDecoder } from 'node:string_decoder';
import { errText } from '../errors.js';
import { ANY, JsonReducer, JsonStreamError, type ReduceLimits, reduceText, type Shape, size } from './json-reduce.js';
import type { ApiTarget } from './kube-config.js';
import { eventShape, listShape } from './object-shapes.js';

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

/**
 * Bounds on API answers: an etcd object is at most ~1.5 MB and escaping at most ~6x, so a bigger event is not
 * Kubernetes; shaped objects are streamed and capped, whole bodies fail past maxBodyBytes instead of an OOM-kill.
 */
export const DEFAULT_API_LIMITS = { maxBodyBytes: 64 << 20, maxEventBytes: 16 << 20, maxValueBytes: 16 << 10 };
type ApiLimits = typeof DEFAULT_API_LIMITS;

export class KubeApi {
  readonly limits: ApiLimits;
  constructor(
    readonly target: ApiTarget,
    limits: Partial<ApiLimits> = {},
  ) {
    this.limits = { ...DEFAULT_API_LIMITS, ...limits };
  }

  /**
   * GETs one page; with `item`, each item is reduced to that shape as it arrives, or a SkippedObject in its place.
   * `signal` aborts the request (its owner stopping).
   */
  async listPage(path: string, query: Record<string, string>, timeoutMs = 30_000, item?: Shape, signal?: AbortSignal) {
    const what = `GET ${path}`;
    const { res } = await this.get(path, query, timeoutMs, what, signal);
    const answer = item
      ? await readReduced(res, what, listShape(item), reduceLimits(this.limits))
      : parseWhole(await readBody(res, what, this.limits.maxBodyBytes), what);
    const list = answer as { metadata?: { resourceVersion?: unknown; continue?: unknown }; items?: unknown } | null;
    if (!Array.isArray(list?.items) || typeof list.metadata?.resourceVersion !== 'string')
      throw new ApiError(`${what}: the answer is not a list`);
    const next = list.metadata.continue;
    const continueToken = typeof next === 'string' && next !== '' ? next : undefined;
    return { resourceVersion: list.metadata.resourceVersion, items: list.items as unknown[], continueToken };
  }

  /** Whether the API server serves `path` (a discovery document such as /apis/GROUP): false on 404. */
  async serves(path: string, signal?: AbortSignal): Promise<boolean> {
    try {
      const { res } = await this.get(path, {}, 30_000, `GET ${path}`, signal);
      res.resume();
      return true;
    } catch (e) {
      if (e instanceof ApiError && e.statusCode === 404) return false;
      throw e;
    }
  }

  /**
   * Opens a watch; rejects if unreachable or refused, then `onEvent` per event and `onEnd` once; resolves to a closer.
   * Silence past the server's watch timeout (timeoutSeconds, else 5 min) plus 30 s counts as a broken stream.
   */
  async watch(
    path: string,
    query: Record<string, string>,
    onEvent: (type: string, object: unknown) => void,
    onEnd: (err?: ApiError) => void,
    object: Shape = ANY,
    signal?: AbortSignal,
  ): Promise<() => void> {
    const what = `watch ${path}`;
    const idleMs = (Number(query.timeoutSeconds) || 300) * 1000 + 30_000;
    const { req, res } = await this.get(path, { ...query, watch: 'true' }, idleMs, what, signal);
    let ended = false;
    const end = (err?: ApiError): void => {
      if (ended) return;
      ended = true;
      req.destroy();
      onEnd(err);
    };
    const deliver = (event: unknown): void => {
      if (ended) return;
      const type = (event as { type?: unknown } | null)?.type;
      if (typeof type !== 'string') {
        end(new ApiError(`${what}: an event has no type`));
        return;
      }
      try {
        onEvent(type, (event as { object?: unknown }).object);
      } catch (e) {
        // An event the consumer cannot apply ends this watch (then relist/resume), never the process.
        end(new ApiError(`${what}: a ${type} event could not be applied: ${errText(e)}`));
      }
    };
    // Events are read as they arrive, each reduced to the object's shape, up to maxEventBytes raw.
    feed(res, new JsonReducer(eventShape(object), reduceLimits(this.limits), deliver, true), what, end);
    // After the answer, a reset or a silent connection shows up on the request or the socket.
    req.on('error', (e) => end(new ApiError(`${what}: ${lostText(e)}`)));
    return () => end(undefined);
  }

  /** Sends the GET, again once with a new credential when a plugin's is refused (401: revoked or expired early). */
  private async get(path: string, query: Record<string, string>, idleMs: number, what: string, signal?: AbortSignal) {
    const url = new URL(this.target.server + path);
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
    const base = await this.target.requestOptions();
    try {
      return await this.send({ ...base, signal }, url, idleMs, what);
    } catch (e) {
      if (!(e instanceof ApiError && e.statusCode === 401 && this.target.refused?.(base))) throw e;
      return this.send({ ...(await this.target.requestOptions()), signal }, url, idleMs, what);
    }
  }

  /** One GET: its answer once the head says 200, else the refusal (or transport failure) as an ApiError. */
  private async send(base: RequestOptions, url: URL, idleMs: number, what: string) {
    const opts: RequestOptions = { ...base, method: 'GET', headers: { ...base.headers, accept: 'application/json' } };
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, opts);
    req.setTimeout(idleMs, () =>
      req.destroy(new Error(`no data from the API server in ${Math.round(idleMs / 1000)} s`)),
    );
    // Keepalive probes find a peer that vanished without a word (node rebooted, NAT entry gone).
    req.on('socket', (s) => s.setKeepAlive(true, 30_000));
    req.end();
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      req.once('response', resolve);
      req.once('error', (e) => reject(new ApiError(`${what}: ${transportText(e)}`)));
    });
    if (res.statusCode === 200) return { req, res };
    // An error answer is a Status of a few hundred bytes; more of it is not read.
    const body = await readBody(res, what, Math.min(this.limits.maxBodyBytes, 1 << 20));
    throw new ApiError(`${what}: ${statusText(res.statusCode ?? 0, body)}`, res.statusCode);
  }
}

function parseWhole(body: string, what: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    throw new ApiError(`${what}: the answer is not JSON (${body.slice(0, 80)})`);
  }
}

const reduceLimits = (limits: ApiLimits): ReduceLimits => ({
  maxValueBytes: limits.maxValueBytes,
  maxUnitBytes: limits.maxEventBytes,
});

/** One JSON answer reduced to `shape` as it arrives, so no piece is held past its own parsing. */
function readReduced(res: IncomingMessage, what: string, shape: Shape, limits: ReduceLimits): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let value: unknown;
    feed(res, new JsonReducer(shape, limits, (v) => (value = v)), what, (err) => {
      if (!err) return resolve(value);
      reject(err);
      res.destroy();
    });
  });
}

/** Writes the answer to `reader` as it arrives; `done` once, with what stopped it unless the answer was complete. */
function feed(res: IncomingMessage, reader: JsonReducer, what: string, done: (err?: ApiError) => void): void {
  let finished = false;
  const finish = (err?: ApiError): void => {
    if (finished) return;
    finished = true;
    done(err);
  };
  const read = (step: () => void): void => {
    if (finished) return;
    try {
      step();
    } catch (e) {
      finish(new ApiError(`${what}: ${streamText(e)}`));
    }
  };
  const end = (): void =>
    read(() => {
      reader.end();
      finish();
    });
  res.on('data', (chunk: Buffer) => read(() => reader.write(chunk)));
  res.on('end', end);
  res.on('error', (e) => finish(new ApiError(`${what}: ${lostText(e)}`)));
  res.on('close', () => (res.complete ? end() : finish(new ApiError(`${what}: connection to the API server lost`))));
}

/** What a reader error says; anything but a JsonStreamError is a bug and says so. */
function streamText(e: unknown): string {
  return e instanceof JsonStreamError ? e.message : `the answer could not be read: ${errText(e)}`;
}

/** The whole body as text, decoded piece by piece so the socket's buffers are released at once. */
function readBody(res: IncomingMessage, what: string, maxBytes: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const tooBig = (): void => {
      reject(new ApiError(`${what}: the answer is larger than ${size(maxBytes)}`));
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
  return e.message === 'aborted' || code === 'ECONNRESET' || code === 'EPIPE'
    ? `connection to the API server lost${code ? ` (${code})` : ''}`
    : transportText(e);
}

/** "connect ECONNREFUSED 10.0.0.1:443", TLS errors with their code ("... (UNABLE_TO_VERIFY_LEAF_SIGNATURE)"). */
function transportText(e: Error): string {
  const code = (e as NodeJS.ErrnoException).code;
  return code && !e.message.includes(code) ? `${e.message} (${code})` : e.message;
}

function statusText(status: number, body: string): string {
  try {
    const s = JSON.parse(body) as { message?: unknown; reason?: unknown };
    if (typeof s.message === 'string')
      return `${status} ${typeof s.reason === 'string' ? `${s.reason}: ` : ''}${s.message}`;
  } catch {
    // not a Status object
  }
  return `${status} ${body.slice(0, 120)}`;
}

/** One watch-stream line: the event, undefined for a blank line, or an error text; exported for the fuzz harness. */
export function parseWatchLine(line: string): { type: string; object: unknown } | undefined | string {
  if (line.trim() === '') return undefined;
  let event: unknown;
  try {
    event = reduceText(line, eventShape(ANY), reduceLimits(DEFAULT_API_LIMITS));
  } catch {
    return `an event is not JSON (${line.slice(0, 80)})`;
  }
  const type = (event as { type?: unknown } | null)?.type;
  if (typeof type !== 'string') return `an event has no type (${line.slice(0, 80)})`;
  return { type, object: (event as { object?: unknown }).object };
}
