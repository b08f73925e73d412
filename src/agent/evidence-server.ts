// Evidence for one Service as NDJSON, shared by the 0600 Unix socket and HTTP /evidence under one set of caps
// (connections, answers, entries, ask timeout, stalled readers dropped) so no caller can starve sources or /healthz.
import { chmodSync, mkdirSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { dirname } from 'node:path';
import type { Writable } from 'node:stream';
import type { ServiceView } from '../cluster/types.js';
import { errText } from '../errors.js';
import type { ConntrackTable, KeptEntry } from './conntrack-table.js';
import {
  type EvidenceLine,
  type EvidenceRequest,
  entryLine,
  isEvidenceFor,
  parseServiceRef,
  serviceAddresses,
} from './evidence.js';
import { evidenceOwnership } from './evidence-ownership.js';

export interface EvidenceBackend {
  table(): ConntrackTable;
  find(namespace: string, name: string, port?: number): ServiceView[];
  nodeName: string;
  ifname?: string;
}

/** Backpressure keeps an answer near one socket buffer, so these caps are about CPU and fairness. */
const DEFAULT_EVIDENCE_LIMITS = {
  maxConnections: 32,
  /** Answers being written at once (each holds its matched entries' list and a socket buffer). */
  maxAnswers: 4,
  /** Watches at once (each holds at most maxLiveQueueBytes and no answer slot once its entries are sent). */
  maxWatches: 16,
  /** Entries per answer, the current ones and the watched ones together. */
  maxEntries: 10_000,
  /** Time from connecting to a complete request line. */
  requestTimeoutMs: 5_000,
  /** Time a reader may take nothing of what waits for it. */
  stallTimeoutMs: 30_000,
  maxRequestBytes: 4096,
  /** Bytes of new entries that may wait for a slow watching reader; past it they are counted as dropped. */
  maxLiveQueueBytes: 1 << 20,
};

export type EvidenceLimits = typeof DEFAULT_EVIDENCE_LIMITS;

export const MAX_WATCH_S = 3600;

/** A request line as an EvidenceRequest; throws what is wrong with it. */
export function parseEvidenceRequest(text: string): EvidenceRequest {
  let r: unknown;
  try {
    r = JSON.parse(text);
  } catch {
    throw new Error(`the request is not JSON (want {"service":"NAMESPACE/NAME"} and a newline)`);
  }
  if (typeof r !== 'object' || r === null || Array.isArray(r))
    throw new Error('the request must be a JSON object like {"service":"NAMESPACE/NAME"}');
  const o = r as Record<string, unknown>;
  if (typeof o.service !== 'string') throw new Error('the request has no "service" text (NAMESPACE/NAME)');
  try {
    parseServiceRef(o.service);
  } catch (e) {
    throw new Error((e as Error).message.replace(/^--service/, '"service"'));
  }
  const req: EvidenceRequest = { service: o.service };
  if (o.port !== undefined) {
    if (typeof o.port !== 'number' || !Number.isInteger(o.port) || o.port < 1 || o.port > 65535) {
      throw new Error(`"port" must be a number from 1 to 65535, not ${JSON.stringify(o.port)}`);
    }
    req.port = o.port;
  }
  if (o.watchS !== undefined) {
    if (typeof o.watchS !== 'number' || !(o.watchS >= 0) || !Number.isFinite(o.watchS)) {
      throw new Error(`"watchS" must be a number of seconds, not ${JSON.stringify(o.watchS)}`);
    }
    req.watchS = Math.min(o.watchS, MAX_WATCH_S);
  }
  return req;
}

const json = (l: EvidenceLine): string =>
  `${JSON.stringify(l, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}\n`;

/** Where an answer is written: a socket connection, or an HTTP response. */
export type AnswerStream = Pick<
  Writable,
  'destroyed' | 'writableEnded' | 'writableLength' | 'write' | 'end' | 'destroy' | 'on' | 'once' | 'off'
>;

/** One caller's stream: writes that wait for the reader, and an end that cannot hang. */
export class Caller {
  answering = false;
  constructor(
    readonly sock: AnswerStream,
    private readonly limits: EvidenceLimits,
  ) {}

  get gone(): boolean {
    return this.sock.destroyed || this.sock.writableEnded;
  }

  /** Writes a line; resolves false when the caller is gone (or dropped for not reading). */
  async send(text: string): Promise<boolean> {
    if (this.gone) return false;
    if (this.sock.write(text)) return true;
    return this.drained();
  }

  private drained(): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (ok: boolean): void => {
        clearTimeout(timer);
        this.sock.off('drain', onDrain);
        this.sock.off('close', onClose);
        resolve(ok);
      };
      const onDrain = (): void => done(true);
      const onClose = (): void => done(false);
      const timer = setTimeout(() => {
        this.sock.destroy();
        done(false);
      }, this.limits.stallTimeoutMs);
      this.sock.on('drain', onDrain);
      this.sock.on('close', onClose);
    });
  }

  /** The last line; a caller that never reads it is dropped after stallTimeoutMs. */
  finish(l: EvidenceLine): void {
    if (this.gone) return;
    this.sock.end(json(l));
    const timer = setTimeout(() => this.sock.destroy(), this.limits.stallTimeoutMs);
    this.sock.once('close', () => clearTimeout(timer));
  }
}

async function answer(c: Caller, req: EvidenceRequest, b: EvidenceBackend, limits: EvidenceLimits): Promise<void> {
  const { namespace, name } = parseServiceRef(req.service);
  const svcs = b.find(namespace, name, req.port);
  if (!svcs.length) {
    const what = `${namespace}/${name}${req.port ? ` port ${req.port}` : ''}`;
    return c.finish({ type: 'error', message: `no LoadBalancer Service ${what} in this node's cluster view` });
  }
  const table = b.table();
  // Ownership is judged against the index the table matches with now (a watch outlives indexes).
  const isEvidence = (k: KeptEntry): boolean => isEvidenceFor(k, svcs, evidenceOwnership(table.serviceIndex));
  // Current entries and new ones from the same moment: none lost between the two, none twice.
  const matched: KeptEntry[] = [];
  for (const k of table.entries()) if (isEvidence(k)) matched.push(k);
  matched.sort((x, y) => x.firstSeenMs - y.firstSeenMs);
  const watchS = req.watchS ?? 0;
  const sent = Math.min(matched.length, limits.maxEntries);
  const omitted = matched.length - sent;
  // New entries up to what the cap leaves; those past it or past the slow-reader queue are counted in the end line.
  let liveBudget = limits.maxEntries - sent;
  const live: string[] = [];
  let liveBytes = 0;
  let dumping = true;
  let n = 0;
  let overCap = 0;
  let tooSlow = 0;
  const listener = (k: KeptEntry): void => {
    if (!isEvidence(k)) return;
    if (liveBudget <= 0) return void overCap++;
    const text = json(entryLine(k, true));
    if (liveBytes + c.sock.writableLength + text.length > limits.maxLiveQueueBytes) return void tooSlow++;
    liveBudget--;
    if (dumping) {
      live.push(text);
      liveBytes += text.length;
      return;
    }
    n++;
    c.sock.write(text);
  };
  const watching = watchS > 0;
  if (watching) table.listeners.add(listener);
  let timer: NodeJS.Timeout | undefined;
  const stop = (): void => {
    clearTimeout(timer);
    table.listeners.delete(listener);
  };
  c.sock.once('close', stop);
  try {
    if (!(await c.send(json({ type: 'service', service: serviceAddresses(svcs, b.ifname), node: b.nodeName }))))
      return stop();
    for (let i = 0; i < sent; i++) {
      if (!(await c.send(json(entryLine(matched[i]!, false))))) return stop();
      n++;
    }
    matched.length = 0;
    dumping = false;
    for (const text of live.splice(0)) {
      if (!(await c.send(text))) return stop();
      n++;
    }
    liveBytes = 0;
    const end = (): void => {
      stop();
      const notSent = omitted + overCap + tooSlow;
      const why = [
        omitted + overCap ? `${omitted + overCap} over the limit of ${limits.maxEntries} entries per answer` : '',
        tooSlow ? `${tooSlow} new ones while the reader lagged by more than ${limits.maxLiveQueueBytes} bytes` : '',
      ].filter(Boolean);
      c.finish({
        type: 'end',
        entries: n,
        ...(notSent ? { truncated: true, notSent, reason: `not sent: ${why.join('; ')}` } : {}),
      });
    };
    if (!watching) return end();
    timer = setTimeout(end, watchS * 1000);
  } catch (e) {
    stop();
    throw e;
  }
}

/** The answers in progress, shared by the socket and the HTTP route under one set of caps. */
export class EvidenceAnswers {
  readonly limits: EvidenceLimits;
  private answering = 0;
  private watches = 0;

  constructor(
    private readonly backend: EvidenceBackend,
    limits: Partial<EvidenceLimits> = {},
  ) {
    this.limits = { ...DEFAULT_EVIDENCE_LIMITS, ...limits };
  }

  /** Answers `req` on the caller's stream, or ends it with why not (busy). */
  serve(c: Caller, req: EvidenceRequest): void {
    const limits = this.limits;
    if (this.answering >= limits.maxAnswers) {
      c.finish({ type: 'error', message: `busy: ${limits.maxAnswers} evidence answers in progress; try again` });
      return;
    }
    const watching = (req.watchS ?? 0) > 0;
    if (watching && this.watches >= limits.maxWatches) {
      c.finish({
        type: 'error',
        message: `busy: ${limits.maxWatches} evidence watches in progress; try again, or ask without --watch`,
      });
      return;
    }
    // The slot is held while current entries are written, and for a watch's whole length.
    this.answering++;
    c.answering = true;
    if (watching) {
      this.watches++;
      c.sock.once('close', () => this.watches--);
    }
    answer(c, req, this.backend, limits)
      .catch((e: unknown) => c.finish({ type: 'error', message: `evidence failed: ${errText(e)}` }))
      .finally(() => this.answering--);
  }
}

/** Listens on `path`, created 0600 with the umask tightened around bind, so others can never connect. */
export function startEvidenceServer(path: string, answers: EvidenceAnswers): Promise<Server> {
  const limits = answers.limits;
  mkdirSync(dirname(path), { recursive: true });
  rmSync(path, { force: true });
  // Insertion order is age: the first caller still asking is the oldest.
  const callers = new Map<Socket, Caller>();
  const server = createServer((sock) => {
    if (callers.size >= limits.maxConnections) {
      const silent = [...callers].find(([, c]) => !c.answering)?.[0];
      if (silent) {
        silent.destroy();
        callers.delete(silent);
      } else {
        sock.on('error', () => sock.destroy());
        sock.end(
          json({
            type: 'error',
            message: `too many connections to the evidence socket (${limits.maxConnections}), all answering; try again`,
          }),
        );
        setTimeout(() => sock.destroy(), 1000).unref();
        return;
      }
    }
    const c = new Caller(sock, limits);
    callers.set(sock, c);
    sock.on('close', () => callers.delete(sock));
    sock.on('error', () => sock.destroy());
    sock.setTimeout(limits.requestTimeoutMs, () => {
      if (c.answering) return;
      c.finish({ type: 'error', message: `no request within ${limits.requestTimeoutMs / 1000} s` });
      sock.destroy();
    });
    let received = Buffer.alloc(0);
    const onData = (d: Buffer): void => {
      received = Buffer.concat([received, d]);
      const nl = received.indexOf(10);
      if (nl < 0 && received.length <= limits.maxRequestBytes) return;
      sock.off('data', onData);
      if (nl >= 0) {
        sock.pause();
        sock.setTimeout(0);
      }
      if ((nl < 0 ? received.length : nl) > limits.maxRequestBytes) {
        c.finish({ type: 'error', message: `request longer than ${limits.maxRequestBytes} bytes` });
        return;
      }
      let req: EvidenceRequest;
      try {
        req = parseEvidenceRequest(received.toString('utf8', 0, nl));
      } catch (e) {
        c.finish({ type: 'error', message: errText(e) });
        return;
      }
      answers.serve(c, req);
    };
    sock.on('data', onData);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    // The socket file is made by the bind inside listen(), synchronously: 0600 from its first moment.
    const umask = process.umask(0o177);
    try {
      server.listen(path, () => {
        server.off('error', reject);
        chmodSync(path, 0o600); // whatever umask the process was started with
        resolve(server);
      });
    } finally {
      process.umask(umask);
    }
  });
}
