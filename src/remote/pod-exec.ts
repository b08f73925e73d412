// One command in a pod's container via the exec subresource, as `kubectl exec`, so RBAC decides who may.
// WebSocket v5/v4.channel.k8s.io: byte 0 is the channel (1 stdout, 2 stderr, 3 final Status, 255 v5 close).
// A refused upgrade's Status body is read, since it names the missing verb or wrong container.
import type { IncomingMessage } from 'node:http';
import WebSocket from 'ws';
import type { ApiTarget } from '../cluster/kube-config.js';
import { errText } from '../errors.js';
import { readRefusal, refusalText } from './evidence-lines.js';

/** Versions whose channel 3 carries a JSON Status (older ones send plain text). */
const PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
// The channels of the frames read; others (v5's 255, close-stream) are left: the status frame ends everything.
const CHANNEL = { stdout: 1, stderr: 2, status: 3 } as const;

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

/** HTTP refusals of the exec upgrade, in words that say what to fix. */
const REFUSALS: Record<number, [ExecFailureKind, (msg: string, target: ExecTarget) => string]> = {
  401: ['unauthorized', (msg) => `401 Unauthorized: the API server rejected the kubeconfig's credentials (${msg})`],
  // A WebSocket exec is a GET: authorized as "get" pods/exec, and since 1.35
  // (AuthorizePodWebsocketUpgradeCreatePermission) also as "create".
  403: [
    'forbidden',
    (msg, target) =>
      `403 Forbidden: ${msg} (needs RBAC verbs "get" and "create" on ` +
      `"pods/exec" in namespace ${target.namespace}; see deploy/oncall-rbac.yaml)`,
  ],
  404: ['not-found', (msg, target) => `404 Not Found: pod ${target.namespace}/${target.pod} is gone (${msg})`],
};

function refusalError(code: number, body: string, target: ExecTarget): PodExecError {
  const msg = refusalText(body);
  const [kind, text] = REFUSALS[code] ?? ['refused', () => `${code}: ${msg}`];
  return new PodExecError(text(msg, target), kind, code);
}

/** Runs `command`, its output passed on frame by frame; the exit code, or a PodExecError on failure or timeout. */
export function execInPod(
  api: ApiTarget,
  target: ExecTarget,
  command: string[],
  out: Record<'stdout' | 'stderr', (chunk: Buffer) => void>,
  timeoutMs: number,
): Promise<number> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let socket: WebSocket | undefined;
    let status: ExecStatus | undefined;
    let refusal: PodExecError | undefined;
    let transportError: Error | undefined;
    /** Settles once, with the exit code `outcome` returns or the PodExecError it throws. */
    const settle = (outcome: () => number): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      try {
        resolve(outcome());
      } catch (e) {
        reject(e);
      }
    };
    const timer = setTimeout(() => {
      settle(() => {
        throw new PodExecError(`no exit status within ${Math.round(timeoutMs / 1000)} s (timeout)`, 'timeout');
      });
      socket?.terminate();
    }, timeoutMs);
    // The socket ends every path: after the status, a refused upgrade, a transport error, or a cut.
    const onClose = (): void =>
      settle(() => {
        if (status) return exitCodeOf(status);
        if (refusal) throw refusal;
        if (transportError)
          throw new PodExecError(`cannot reach the API server: ${transportError.message}`, 'connection');
        throw new PodExecError('the connection closed before the exit status (pod or node restarted?)', 'no-status');
      });
    const connect = async (): Promise<void> => {
      const query = new URLSearchParams({
        stdout: 'true',
        stderr: 'true',
        stdin: 'false',
        tty: 'false',
        container: target.container,
      });
      for (const word of command) query.append('command', word);
      const pod = `${encodeURIComponent(target.namespace)}/pods/${encodeURIComponent(target.pod)}`;
      const path = `/api/v1/namespaces/${pod}/exec`;
      const options = await api.requestOptions();
      if (settled) return;
      const ws = new WebSocket(`${api.server.replace(/^http/, 'ws')}${path}?${query}`, PROTOCOLS, options);
      socket = ws;
      ws.on('error', (e) => (transportError ??= e));
      ws.on('close', onClose);
      // With this listener ws leaves the refused handshake to us: read the Status, then abort.
      ws.on('unexpected-response', (_req, res: IncomingMessage) => {
        res.on('error', () => ws.terminate());
        readRefusal(res, (body) => {
          refusal = refusalError(res.statusCode ?? 0, body, target);
          ws.terminate();
        });
      });
      ws.once('open', () => {
        if (PROTOCOLS.includes(ws.protocol)) return;
        transportError = new Error(
          `the API server speaks ${JSON.stringify(ws.protocol)}, not ${PROTOCOLS.join(' or ')}`,
        );
        ws.terminate();
      });
      ws.on('message', (data: Buffer, isBinary: boolean) => {
        if (!isBinary || data.length < 1) return;
        const body = data.subarray(1);
        if (data[0] === CHANNEL.stdout) out.stdout(body);
        else if (data[0] === CHANNEL.stderr) out.stderr(body);
        else if (data[0] === CHANNEL.status) {
          try {
            status = JSON.parse(body.toString('utf8')) as ExecStatus;
            ws.close();
          } catch (e) {
            // A garbled status frame must not take the process down.
            transportError = new Error(`unreadable exit status frame: ${errText(e)}`);
            ws.terminate();
          }
        }
      });
    };
    // Failures before a socket exists (the kubeconfig's exec plugin, a bad server URL); others end in onClose.
    connect().catch((e: unknown) =>
      settle(() => {
        throw new PodExecError(`cannot open the exec connection: ${errText(e)}`, 'connection');
      }),
    );
  });
}
