// What every HTTP server of clbprobe (the agent's :9811, the evidence relay) applies: where it
// listens, and its connection and time limits.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { UserError } from './user-error.js';

/** "host:port", ":port" (all addresses) or "port". */
export function parseListen(listen: string): { host?: string; port: number } {
  const i = listen.lastIndexOf(':');
  const host = i < 0 ? '' : listen.slice(0, i).replace(/^\[(.*)\]$/, '$1');
  const portText = i < 0 ? listen : listen.slice(i + 1);
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) throw new UserError(`--listen: bad port in ${JSON.stringify(listen)}`);
  return host ? { host, port } : { port };
}

/**
 * Connection and time limits, so that clients that connect and say nothing, trickle headers, or never
 * read cannot hold the agent's file descriptors and memory. At the cap the oldest connection not being
 * served gives way to the new one, so a kubelet probe gets in while hostile clients churn each other out.
 */
export interface ServerLimits {
  maxConnections: number;
  /** Time to send a request's headers. */
  headersTimeoutMs: number;
  /** Time to send a whole request. */
  requestTimeoutMs: number;
  /** Time a kept-alive connection may wait for its next request. */
  keepAliveTimeoutMs: number;
  /** Time a connection may make no progress at all (a reader that takes nothing). */
  stallTimeoutMs: number;
}

export const DEFAULT_SERVER_LIMITS: ServerLimits = {
  maxConnections: 256,
  headersTimeoutMs: 5_000,
  requestTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
  stallTimeoutMs: 30_000,
};

/**
 * Applies `limits` to an HTTP server: the cap with eviction of the oldest connection not being
 * served, and the timeouts.
 */
export function limitConnections(server: Server, limits: ServerLimits): void {
  server.headersTimeout = limits.headersTimeoutMs;
  server.requestTimeout = limits.requestTimeoutMs;
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.timeout = limits.stallTimeoutMs;
  // Insertion order is age; the value says whether a request is being served.
  const open = new Map<Socket, { serving: boolean }>();
  server.on('connection', (sock: Socket) => {
    if (open.size >= limits.maxConnections) {
      let victim: Socket | undefined;
      for (const [s, st] of open) {
        if (!st.serving || s.writableLength > 0) {
          victim = s;
          break;
        }
      }
      if (!victim) return void sock.destroy();
      open.delete(victim);
      victim.destroy();
    }
    open.set(sock, { serving: false });
    sock.once('close', () => open.delete(sock));
  });
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    const st = open.get(req.socket);
    if (!st) return;
    st.serving = true;
    // A reader that takes nothing: node's socket timeout does not see a write that waits, so the
    // progress of what was handed to the socket is watched instead.
    const sock = req.socket;
    let written = sock.bytesWritten;
    const watchdog = setInterval(() => {
      if (sock.writableLength > 0 && sock.bytesWritten === written) sock.destroy();
      written = sock.bytesWritten;
    }, limits.stallTimeoutMs);
    watchdog.unref();
    const done = (): void => {
      clearInterval(watchdog);
      st.serving = false;
    };
    res.once('finish', done);
    res.once('close', done);
  });
}
