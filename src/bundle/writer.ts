// Writes a bundle: standard commands run in the collected namespace into named files, each step recorded for the
// manifest; a failure is written down, never thrown.
import { execFile } from 'node:child_process';
import { accessSync, constants, statSync, writeFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import type { ManifestEntry } from './manifest.js';

export interface BundleWriter {
  readonly out: string;
  /** The network namespace collected (path), if not ours. */
  readonly netns?: string;
  readonly timeoutMs: number;
  /** The hostname-only LB names of the bundle's cluster view (the dns source looks them up). */
  readonly lbHostnames: readonly string[];
  /** Runs argv in the namespace collected, writes its stdout (through filter) to file, records the step. */
  run(file: string, argv: string[], filter?: (out: string) => string): Promise<ManifestEntry>;
  /** Records a step that was not run, and why. */
  skip(command: string, error: string): void;
  /** Records a step the source ran itself. */
  add(entry: ManifestEntry): void;
  /** argv run inside the namespace collected. */
  inNs(argv: string[]): string[];
}

export function bundleWriter(
  out: string,
  files: ManifestEntry[],
  opts: { netns?: string; timeoutMs: number; lbHostnames?: readonly string[] },
): BundleWriter {
  const inNs = (argv: string[]): string[] => (opts.netns ? ['nsenter', `--net=${opts.netns}`, '--', ...argv] : argv);
  return {
    out,
    ...(opts.netns ? { netns: opts.netns } : {}),
    timeoutMs: opts.timeoutMs,
    lbHostnames: opts.lbHostnames ?? [],
    inNs,
    async run(file, argv, filter) {
      const entry = await runToFile(join(out, file), file, inNs(argv), opts.timeoutMs, filter);
      files.push(entry);
      return entry;
    },
    skip(command, error) {
      files.push({ command, durationMs: 0, skipped: true, error });
    },
    add(entry) {
      files.push(entry);
    },
  };
}

/** Runs argv, writes its stdout (through filter) to path, and records how it went. */
export function runToFile(
  path: string,
  file: string,
  argv: string[],
  timeoutMs: number,
  filter?: (out: string) => string,
): Promise<ManifestEntry> {
  const t0 = performance.now();
  const command = argv.join(' ');
  return new Promise((resolve) => {
    execFile(
      argv[0]!,
      argv.slice(1),
      {
        timeout: timeoutMs,
        killSignal: 'SIGKILL',
        maxBuffer: 1024 * 1024 * 1024,
        env: { ...process.env, LC_ALL: 'C' },
      },
      (err, stdout, stderr) => {
        const entry: ManifestEntry = { command, exitStatus: 0, durationMs: ms(t0) };
        if (err) {
          entry.exitStatus = typeof err.code === 'number' ? err.code : null;
          entry.error =
            err.code === 'ENOENT'
              ? `${argv[0]} not found in PATH`
              : err.killed
                ? `timed out after ${timeoutMs} ms`
                : String(stderr).trim().split('\n')[0] || `exited with ${err.code ?? err.signal}`;
        }
        // Partial output of a failing command can still help; empty output is not written.
        if (stdout.length > 0 || !err) {
          writeFileSync(path, filter ? filter(stdout) : stdout);
          Object.assign(entry, { file, size: statSync(path).size });
        }
        resolve(entry);
      },
    );
  });
}

export function onPath(cmd: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, cmd), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** Milliseconds since t0, to 0.1 ms (as the manifest records durations). */
export function ms(t0: number): number {
  return Math.round((performance.now() - t0) * 10) / 10;
}
