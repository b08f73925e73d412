// Runs shell scripts as root inside a qemu VM booting Debian's kernel (IPVS and
// dummy links exist there, unlike on the CI kernel); see run-in-vm.sh. Boot
// costs ~6-10 s under TCG, so a test file should run ONE script that does all
// its work and prints sections (see sections()), not one VM per test.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PROJECT_ROOT = fileURLToPath(new URL('../..', import.meta.url));
const RUN_IN_VM = join(PROJECT_ROOT, 'test/vm/run-in-vm.sh');

export interface GuestResult {
  stdout: string;
  stderr: string;
  /** The script's exit status. */
  code: number;
  wallMs: number;
}

export interface GuestOptions {
  /** Whole VM run including boot, seconds (default 240). */
  timeoutS?: number;
  /** Modules to load before the script (default: IPVS core + rr/wrr/sh, dummy). */
  modules?: string[];
  /** Named virtio-serial ports: guest /dev/virtio-ports/NAME <-> the host Unix socket (listening) at the path. */
  ports?: Record<string, string>;
}

/** The VM could not run the script (no qemu, boot failure, timeout): a test failure, never a skip. */
export class VmError extends Error {
  override name = 'VmError';
}

/**
 * Runs script (bash) as root in a fresh VM with the project directory shared
 * read-write at the same path (cwd = project root) and the host's / read-only,
 * so dist/ and the host's tools run inside. The guest has no network.
 */
export function runInGuest(script: string, opts: GuestOptions = {}): Promise<GuestResult> {
  if (spawnSync('sh', ['-c', 'command -v qemu-system-x86_64'], { stdio: 'ignore' }).status !== 0) {
    return Promise.reject(
      new VmError('qemu-system-x86_64 is not installed; run scripts/setup.sh (it installs qemu-system-x86)'),
    );
  }
  if (process.getuid?.() !== 0) return Promise.reject(new VmError('VM tests must run as root'));
  const timeoutS = opts.timeoutS ?? 240;
  const env: NodeJS.ProcessEnv = { ...process.env, CLBVM_TIMEOUT: String(timeoutS) };
  if (opts.modules) env.CLBVM_MODULES = opts.modules.join(' ');
  if (opts.ports)
    env.CLBVM_PORTS = Object.entries(opts.ports)
      .map(([name, path]) => `${name}=${path}`)
      .join(' ');
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [RUN_IN_VM, script], { cwd: PROJECT_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', (e) => reject(new VmError(`cannot start ${RUN_IN_VM}: ${e.message}`)));
    child.on('close', (code, signal) => {
      const r = {
        stdout: Buffer.concat(out).toString(),
        stderr: Buffer.concat(err).toString(),
        code: code ?? -1,
        wallMs: Date.now() - started,
      };
      if (code === 125 || code === null) {
        reject(
          new VmError(`the VM failed (${signal ?? `exit ${code}`}) after ${r.wallMs} ms:\n${r.stderr.slice(-4000)}`),
        );
      } else resolve(r);
    });
  });
}

/** Splits output made of "=== name" marker lines into {name: text}. */
export function sections(stdout: string): Record<string, string> {
  const out: Record<string, string> = {};
  let name: string | undefined;
  for (const line of stdout.split('\n')) {
    const m = /^=== (.+)$/.exec(line);
    if (m) out[(name = m[1]!)] = '';
    else if (name !== undefined) out[name] += `${line}\n`;
  }
  return out;
}

/** Fails unless dist/ holds a build at least as new as the given sources (the guest runs dist/, it cannot build). */
export function assertBuilt(distFile: string, sources: string[]): void {
  const dist = join(PROJECT_ROOT, distFile);
  const addon = join(PROJECT_ROOT, 'build/Release/clbprobe.node');
  if (!existsSync(dist) || !existsSync(addon)) {
    throw new VmError(`${existsSync(dist) ? addon : dist} missing: run npm run build (or scripts/setup.sh) first`);
  }
  const builtAt = statSync(dist).mtimeMs;
  const stale = sources.filter((s) => statSync(join(PROJECT_ROOT, s)).mtimeMs > builtAt);
  if (stale.length) throw new VmError(`${distFile} is older than ${stale.join(', ')}: run npm run build first`);
}
