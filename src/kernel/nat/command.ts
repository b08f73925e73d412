// Runs one save command (in a network namespace when asked), keeping its output as bytes up to a bound or handing
// it over line by line, so a huge ruleset gives a reason instead of an agent killed for memory.
import { spawn } from 'node:child_process';
import { errText } from '../../errors.js';
import { isPermissionReason, permissionDenied } from '../../model/permission.js';
import { type LineFn, LineSplitter } from './line-split.js';

export type CommandResult = { ok: true; stdout: Buffer } | { ok: false; reason: string };
export type LinesResult = { ok: true } | { ok: false; reason: string };

export interface CommandOptions {
  netns?: string;
  timeoutMs: number;
  /** Bound on what stdout may print; past it the command is killed and the result says so. */
  maxBytes: number;
  /** Whose bound maxBytes is, in that message; default 'NAT'. */
  reader?: string;
}

const PACKAGE_OF: Record<string, string> = { ip: 'iproute2', nsenter: 'util-linux', nft: 'the nftables package' };
/** Enough of stderr for the first lines of any error message. */
const STDERR_MAX = 64 * 1024;

export function runCommand(cmd: string, args: string[], opts: CommandOptions): Promise<CommandResult> {
  const out = new GrowingBytes();
  return runWith(
    cmd,
    args,
    opts,
    (chunk) => out.append(chunk),
    () => out.clear(),
  ).then((r) => (r.ok ? { ok: true, stdout: out.take() } : r));
}

/** Hands the output over a line at a time, keeping none; an over-long line or a throw from onLine stops it. */
export function runCommandLines(
  cmd: string,
  args: string[],
  opts: CommandOptions & { maxLineBytes: number },
  onLine: LineFn,
): Promise<LinesResult> {
  const lines = new LineSplitter(opts.maxLineBytes, onLine);
  return runWith(
    cmd,
    args,
    opts,
    (chunk) => lines.push(chunk),
    () => undefined,
    () => lines.end(),
  );
}

/** Spawns the command; each stdout chunk goes to onChunk (whose throw stops it), then onEnd on success. */
function runWith(
  cmd: string,
  args: string[],
  opts: CommandOptions,
  onChunk: (chunk: Buffer) => void,
  onTooBig: () => void,
  onEnd: () => void = () => undefined,
): Promise<LinesResult> {
  const [file, argv] = inNetns(cmd, args, opts.netns);
  return new Promise((resolve) => {
    let size = 0;
    let stderr = '';
    let why: 'timeout' | 'too-big' | 'reader' | undefined;
    let readerError = '';
    let done = false;
    const finish = (lines: LinesResult): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(lines);
    };
    const child = spawn(file, argv, { env: { ...process.env, LC_ALL: 'C' }, stdio: ['ignore', 'pipe', 'pipe'] });
    const stop = (reason: typeof why): void => {
      why ??= reason;
      child.kill('SIGKILL');
    };
    const timer = setTimeout(() => stop('timeout'), opts.timeoutMs);
    child.stdout.on('data', (chunk: Buffer) => {
      if (why) return;
      if (size + chunk.length > opts.maxBytes) {
        onTooBig();
        stop('too-big');
        return;
      }
      size += chunk.length;
      try {
        onChunk(chunk);
      } catch (e) {
        readerError = errText(e);
        stop('reader');
      }
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (stderr.length < STDERR_MAX)
        stderr += chunk.toString('utf8', 0, Math.min(chunk.length, STDERR_MAX - stderr.length));
    });
    child.on('error', (err: NodeJS.ErrnoException) => {
      finish({ ok: false, reason: err.code === 'ENOENT' ? notFound(file) : `${cmd}: ${err.message}` });
    });
    child.on('close', (code, signal) => {
      if (why === 'timeout') return finish({ ok: false, reason: `timed out after ${opts.timeoutMs} ms` });
      if (why === 'too-big') {
        const bound = `${mib(opts.maxBytes)} (the bound on what the ${opts.reader ?? 'NAT'} reader keeps)`;
        return finish({ ok: false, reason: `printed more than ${bound}; stopped reading it` });
      }
      if (why === 'reader') return finish({ ok: false, reason: `${readerError}; stopped reading it` });
      if (code !== 0) return finish({ ok: false, reason: explainFailure(code, signal, stderr, cmd) });
      try {
        onEnd();
      } catch (e) {
        return finish({ ok: false, reason: errText(e) });
      }
      finish({ ok: true });
    });
  });
}

/** Output copied into one doubling buffer as it arrives, so the pipe's small chunks are freed at once. */
class GrowingBytes {
  private buf = Buffer.allocUnsafeSlow(0);
  size = 0;

  append(chunk: Buffer): void {
    if (this.size + chunk.length > this.buf.length) {
      const bigger = Buffer.allocUnsafeSlow(Math.max(256 * 1024, this.buf.length * 2, this.size + chunk.length));
      this.buf.copy(bigger, 0, 0, this.size);
      this.buf = bigger;
    }
    chunk.copy(this.buf, this.size);
    this.size += chunk.length;
  }

  clear(): void {
    this.buf = Buffer.allocUnsafeSlow(0);
    this.size = 0;
  }

  /** The output, in a buffer of its own size (a doubled buffer would keep up to twice the bytes). */
  take(): Buffer {
    const exact = this.size === this.buf.length ? this.buf : Buffer.from(this.buf.subarray(0, this.size));
    this.clear();
    return exact;
  }
}

function mib(bytes: number): string {
  return bytes % (1024 * 1024) === 0 ? `${bytes / (1024 * 1024)} MiB` : `${bytes} bytes`;
}

function notFound(file: string): string {
  return `${file} not found in PATH (install ${PACKAGE_OF[file] ?? 'the iptables/ipset package'})`;
}

/** The command run in netns: an `ip netns` name (`ip netns exec`) or a path like /proc/PID/ns/net (`nsenter`). */
function inNetns(cmd: string, args: string[], netns: string | undefined): [string, string[]] {
  if (!netns) return [cmd, args];
  if (netns.includes('/')) return ['nsenter', [`--net=${netns}`, '--', cmd, ...args]];
  return ['ip', ['netns', 'exec', netns, cmd, ...args]];
}

/** One line; starts with 'permission denied' for privilege problems (the snapshot command checks that prefix). */
function explainFailure(code: number | null, signal: NodeJS.Signals | null, stderr: string, cmd: string): string {
  const msg = stderr.trim().split('\n')[0] ?? '';
  // `ip netns exec` reports a missing program itself.
  if (/(exec of .*|failed to execute .*): No such file or directory/.test(stderr)) return notFound(cmd);
  if (/permission denied|operation not permitted|you must be root/i.test(stderr)) {
    return permissionDenied('root or CAP_NET_ADMIN', `${cmd}: ${msg}`);
  }
  if (/Cannot open network namespace/i.test(stderr)) return msg;
  return msg || `exited with ${code ?? signal}`;
}

/** Prefixes the command unless the reason already names it (permission reasons start with 'permission denied'). */
export function withCommand(cmd: string, reason: string): string {
  return isPermissionReason(reason) || reason.includes(cmd) ? reason : `${cmd}: ${reason}`;
}
