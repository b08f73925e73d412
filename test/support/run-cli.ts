// The compiled CLI as the lab tests run it: from dist/, inside a node's network namespace or not.
import { type SpawnSyncReturns, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const CLI = join(import.meta.dirname, '../../dist/src/cli/main.js');

/** Runs `clbprobe ARGS` inside network namespace `netns` (in this one when undefined) and waits for it. */
export function runCli(
  netns: string | undefined,
  args: readonly string[],
  timeoutMs = 30_000,
): SpawnSyncReturns<string> {
  const argv = [process.execPath, CLI, ...args];
  const [command, ...rest] = netns ? ['ip', 'netns', 'exec', netns, ...argv] : argv;
  return spawnSync(command!, rest, { encoding: 'utf8', timeout: timeoutMs });
}

/** Each non-empty line of `text` parsed as JSON (the CLI's --json streams). */
export function jsonLines<T>(text: string): T[] {
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as T);
}

/** Throws unless the CLI has been built (the lab tests run dist/, not the sources). */
export function requireBuiltCli(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} missing: run npm run build first`);
}
