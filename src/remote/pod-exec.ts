// Runs one command in a pod's container through the API server's exec
// subresource, as `kubectl exec` does, so the cluster's RBAC decides who may.
// The transport is a WebSocket speaking v5/v4.channel.k8s.io: byte 0 of each
// binary frame is the channel (1 stdout, 2 stderr, 3 the final metav1.Status
// with the exit code, 255 v5 close-stream). client-node's Exec builds the
// request and decodes the channels; we give it our own connection (its
// documented WebSocketInterface) because its default one throws away the
// body of a refused upgrade, and that body (a Status) is what names the
// missing RBAC verb or the wrong container.
import type { IncomingMessage } from 'node:http';
import type { Writable } from 'node:stream';
import { Exec, type KubeConfig } from '@kubernetes/client-node';
import WebSocket from 'ws';

/** Versions whose channel 3 carries a JSON Status (older ones send plain text). */
const PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
/** v5: a frame [255, channel] says the server closed that channel; the status frame ends everything anyway. */
const CLOSE_STREAM = 255;

export type ExecFailureKind =
  | 'unauthorized'
  | 'forbidden'
  | 'not-found'
  | 'refused'
  | 'timeout'
  | 'connection'
  | 'no-status'
  | 'failed';

export class PodExecError extends Error {
  constructor(
    message: string,
    readonly kind: ExecFailureKind,
    readonly statusCode?: number,
  ) {
    super(message);
    this.name = 'PodExecError';
  }
}

export interface ExecTarget {
  namespace: string;
  pod: string;
  container: string;
}

/** Where the command's output goes, chunk by chunk as frames arrive. */
export interface ExecOutput {
  stdout(chunk: Buffer): void;
  stderr(chunk: Buffer): void;
}

/** The Status object the API server sends on channel 3 when the command ends. */
export interface ExecStatus {
  status?: string;
  message?: string;
  reason?: string;
  details?: { causes?: { reason?: string; message?: string }[] };
}

/** The command's exit code from the final Status; any other failure (e.g. the binary is missing) throws. */
export function exitCodeOf(s: ExecStatus): number {
  if (s.status === 'Success') return 0;
  if (s.reason === 'NonZeroExitCode') {
    const code = Number(s.details?.causes?.find((c) => c.reason === 'ExitCode')?.message);
    if (Number.isInteger(code)) return code;
  }
  throw new PodExecError(`the command did not run: ${s.message ?? JSON.stringify(s)}`, 'failed');
}

/** The message of a Status body, or the body itself (trimmed) when it is not one. */
function statusMessage(body: string): string {
  try {
    const m = (JSON.parse(body) as { message?: unknown }).message;
    if (typeof m === 'string') return m;
  } catch {
    // not JSON: a proxy or load balancer in front of the API server answered
  }
  return body.trim().slice(0, 300) || '(empty answer)';
}

/** An HTTP refusal of the exec upgrade, in words that say what to fix. */
export function refusalError(code: number, body: string, t: ExecTarget): PodExecError {
  const msg = statusMessage(body);
  switch (code) {
    case 401:
      return new PodExecError(
        `401 Unauthorized: the API server rejected the kubeconfig's credentials (${msg})`,
        'unauthorized',
        code,
      );
    // A WebSocket exec is an HTTP GET: authorized as "get" pods/exec, and since
    // Kubernetes 1.35 (AuthorizePodWebsocketUpgradeCreatePermission) also as "create".
    case 403:
      return new PodExecError(
        `403 Forbidden: ${msg} (needs RBAC verbs "get" and "create" on "pods/exec" in namespace ${t.namespace}; see deploy/oncall-rbac.yaml)`,
        'forbidden',
        code,
      );
    case 404:
      return new PodExecError(`404 Not Found: pod ${t.namespace}/${t.pod} is gone (${msg})`, 'not-found', code);
    default:
      return new PodExecError(`${code}: ${msg}`, 'refused', code);
  }
}

/** Largest refusal body kept (a Status is a few hundred bytes). */
const MAX_BODY = 4096;

/** A Writable-shaped sink for client-node's stream handling (it only calls write and end). */
function sink(write: (b: Buffer) => void): Writable {
  return { write: (b: Buffer) => (write(b), true), end: () => undefined } as unknown as Writable;
}

/**
 * Runs `command` in the target container; output is delivered as it arrives.
 * Resolves to the exit code; rejects with a PodExecError saying why it could
 * not run or did not finish within `timeoutMs`.
 */
export function execInPod(
  kc: KubeConfig,
  t: ExecTarget,
  command: string[],
  out: ExecOutput,
  timeoutMs: number,
): Promise<number> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let socket: WebSocket | undefined;
    let status: ExecStatus | undefined;
    let refusal: PodExecError | undefined;
    let transportError: Error | undefined;
    const settle = (r: { code: number } | { error: PodExecError }): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if ('error' in r) reject(r.error);
      else resolve(r.code);
    };
    const timer = setTimeout(() => {
      settle({
        error: new PodExecError(`no exit status within ${Math.round(timeoutMs / 1000)} s (timeout)`, 'timeout'),
      });
      socket?.terminate();
    }, timeoutMs);

    // The socket ends every path: after the status (normal), after a refused
    // upgrade, after a transport error, or cut in the middle.
    const onClose = (): void => {
      if (status) {
        try {
          settle({ code: exitCodeOf(status) });
        } catch (e) {
          settle({ error: e as PodExecError });
        }
      } else if (refusal) settle({ error: refusal });
      else if (transportError)
        settle({ error: new PodExecError(`cannot reach the API server: ${transportError.message}`, 'connection') });
      else
        settle({
          error: new PodExecError('the connection closed before the exit status (pod or node restarted?)', 'no-status'),
        });
    };
    const connect = async (
      path: string,
      _text: unknown,
      onBinary: ((channel: number, data: Buffer) => boolean) | null,
    ): Promise<WebSocket> => {
      const server = kc.getCurrentCluster()!.server.replace(/\/$/, '');
      const opts: WebSocket.ClientOptions = {};
      await kc.applyToHTTPSOptions(opts);
      const ws = new WebSocket(server.replace(/^http/, 'ws') + path, PROTOCOLS, opts);
      socket = ws;
      if (settled) ws.terminate();
      ws.on('error', (e) => (transportError ??= e));
      ws.on('close', onClose);
      // With this listener ws leaves the refused handshake to us: read the Status, then abort.
      ws.on('unexpected-response', (_req, res: IncomingMessage) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          if (body.length < MAX_BODY) body += d;
        });
        res.on('end', () => {
          refusal = refusalError(res.statusCode ?? 0, body, t);
          ws.terminate();
        });
        res.on('error', () => ws.terminate());
      });
      ws.on('message', (data: Buffer, isBinary: boolean) => {
        // Only the output channels and the status: client-node throws on any other.
        if (!isBinary || data.length < 1 || data[0] === CLOSE_STREAM || data[0]! > 3 || !onBinary) return;
        try {
          if (!onBinary(data[0]!, data.subarray(1))) ws.close();
        } catch (e) {
          // client-node JSON-parses the status frame; a garbled one must not take the process down.
          transportError = new Error(`unreadable exit status frame: ${e instanceof Error ? e.message : String(e)}`);
          ws.terminate();
        }
      });
      return new Promise((resolveOpen, rejectOpen) => {
        ws.once('open', () => {
          if (PROTOCOLS.includes(ws.protocol)) return resolveOpen(ws);
          transportError = new Error(
            `the API server speaks ${JSON.stringify(ws.protocol)}, not ${PROTOCOLS.join(' or ')}`,
          );
          ws.terminate();
        });
        ws.once('close', () => rejectOpen(new Error('closed')));
      });
    };
    const stdout = sink((b) => out.stdout(b));
    const stderr = sink((b) => out.stderr(b));
    new Exec(kc, { connect } as never)
      .exec(t.namespace, t.pod, t.container, command, stdout, stderr, null, false, (s) => {
        status = s as ExecStatus;
      })
      .catch((e: unknown) => {
        // Failures before a socket exists (kubeconfig auth plugin, bad server URL); others end in onClose.
        if (!socket)
          settle({
            error: new PodExecError(
              `cannot open the exec connection: ${e instanceof Error ? e.message : String(e)}`,
              'connection',
            ),
          });
      });
  });
}
