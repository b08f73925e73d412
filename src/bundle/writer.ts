// Writes a bundle: standard commands run in the collected namespace into named files, each step recorded for the
// manifest; a failure is written down, never thrown.
import { execFile } from 'node:child_process';
import { accessSync, constants, statSync, writeFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import type { ManifestEntry } from './manifest.js';

export type BundleWriter = ReturnType<typeof bundleWriter>;

export function bundleWriter(
  out: string,
  files: ManifestEntry[],
  opts: { netns?: string; timeoutMs: number; lbHostnames?: readonly string[] },
) {
  /** argv run inside the namespace collected. */
  const inNs = (argv: string[]): string[] => (opts.netns ? ['nsenter', `--net=${opts.netns}`, '--', ...argv] : argv);
  return {
    out,
    /** The network namespace collected (path), if not ours. */
    netns: opts.netns,
    timeoutMs: opts.timeoutMs,
    /** The hostname-only LB names of the bundle's cluster view (the dns source looks them up). */
    lbHostnames: opts.lbHostnames ?? [],
    inNs,
    /** Runs argv in the namespace collected, writes its stdout (through filter) to file, records the step. */
    async run(file: string, argv: string[], filter?: (out: string) => string): Promise<ManifestEntry> {
      const entry = await runToFile(join(out, file), file, inNs(argv), opts.timeoutMs, filter);
      files.push(entry);
      return entry;
    },
    /** Records a step that was not run, and why. */
    skip(command: string, error: string): void {
      files.push({ command, durationMs: 0, skipped: true, error });
    },
    /** Records a step the source ran itself. */
    add(entry: ManifestEntry): void {
      files.push(entry);
    },
  };
}

/** Writes data to out/file and records the step that made it (an error when it only partly worked). */
export function writeStep(
  out: string,
  file: string,
  command: string,
  data: string | Buffer,
  t0: number,
  error?: string,
): ManifestEntry {
  writeFileSync(join(out, file), data);
  return { file, command, durationMs: ms(t0), size: Buffer.byteLength(data), ...(error ? { error } : {}) };
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
