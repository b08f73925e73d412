// Runs one save command (inside a network namespace when asked) and keeps what
// it prints as bytes, off the JS heap, up to a bound: a node whose rules print
// more than that gets a clear reason instead of an agent killed for memory.
// A missing binary, a permission error or a timeout becomes one line of reason.
import { spawn } from 'node:child_process';
import { permissionDenied } from '../../model/permission.js';

export type CommandResult = { ok: true; stdout: Buffer } | { ok: false; reason: string };

export interface CommandOptions {
  netns?: string;
  timeoutMs: number;
  /** Bound on what stdout may print; past it the command is killed and the result says so. */
  maxBytes: number;
}

const PACKAGE_OF: Record<string, string> = { ip: 'iproute2', nsenter: 'util-linux' };
/** Enough of stderr for the first lines of any error message. */
const STDERR_MAX = 64 * 1024;

export function runCommand(cmd: string, args: string[], opts: CommandOptions): Promise<CommandResult> {
  const [file, argv] = inNetns(cmd, args, opts.netns);
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let stderr = '';
    let why: 'timeout' | 'too-big' | undefined;
    let done = false;
    const finish = (r: CommandResult): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(r);
    };
    const child = spawn(file, argv, { env: { ...process.env, LC_ALL: 'C' }, stdio: ['ignore', 'pipe', 'pipe'] });
    const stop = (reason: typeof why): void => {
      why ??= reason;
      child.kill('SIGKILL');
    };
    const timer = setTimeout(() => stop('timeout'), opts.timeoutMs);
    child.stdout.on('data', (chunk: Buffer) => {
      if (why) return;
      size += chunk.length;
      if (size > opts.maxBytes) {
        chunks.length = 0;
        stop('too-big');
        return;
      }
      chunks.push(chunk);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (stderr.length < STDERR_MAX) stderr += chunk.toString('utf8', 0, Math.min(chunk.length, STDERR_MAX - stderr.length));
    });
    child.on('error', (err: NodeJS.ErrnoException) => {
      finish({ ok: false, reason: err.code === 'ENOENT' ? notFound(file) : `${cmd}: ${err.message}` });
    });
    child.on('close', (code, signal) => {
      if (why === 'timeout') return finish({ ok: false, reason: `timed out after ${opts.timeoutMs} ms` });
      if (why === 'too-big') {
        return finish({
          ok: false,
          reason: `printed more than ${mib(opts.maxBytes)} (the bound on what the NAT reader keeps); stopped reading it`,
        });
      }
      if (code === 0) return finish({ ok: true, stdout: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
      finish({ ok: false, reason: explainFailure(code, signal, stderr, cmd) });
    });
  });
}

function mib(bytes: number): string {
  return bytes % (1024 * 1024) === 0 ? `${bytes / (1024 * 1024)} MiB` : `${bytes} bytes`;
}

function notFound(file: string): string {
  return `${file} not found in PATH (install ${PACKAGE_OF[file] ?? 'the iptables/ipset package'})`;
}

function inNetns(cmd: string, args: string[], netns: string | undefined): [string, string[]] {
  if (!netns) return [cmd, args];
  if (netns.includes('/')) return ['nsenter', [`--net=${netns}`, '--', cmd, ...args]];
  return ['ip', ['netns', 'exec', netns, cmd, ...args]];
}

/** One line; starts with 'permission denied' for privilege problems (the snapshot command checks that prefix). */
function explainFailure(code: number | null, signal: NodeJS.Signals | null, stderr: string, cmd: string): string {
  const msg = stderr.trim().split('\n')[0] ?? '';
  // `ip netns exec` reports a missing program itself.
  if (/(exec of .*|failed to execute .*): No such file or directory/.test(stderr)) {
    return `${cmd} not found in PATH (install the iptables/ipset package)`;
  }
  if (/permission denied|operation not permitted|you must be root/i.test(stderr)) {
    return permissionDenied('root or CAP_NET_ADMIN', `${cmd}: ${msg}`);
  }
  if (/Cannot open network namespace/i.test(stderr)) return msg;
  return msg || `exited with ${code ?? signal}`;
}
