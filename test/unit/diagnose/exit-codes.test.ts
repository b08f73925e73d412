// `clbprobe diagnose`'s exit code through the registered command: "nothing active" (0) needs conntrack to have been
// read, since conntrack is the only evidence that shows a loop active; without it the answer is unknown (2).
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { register } from '../../../src/cli/diagnose.js';

const FIXTURES = new URL('../../fixtures/', import.meta.url).pathname;

/** Runs `diagnose ARGS` as the CLI does; its exit code and what it wrote on stderr. */
async function diagnose(args: string[]): Promise<{ exitCode: number | undefined; stderr: string }> {
  const program = new Command().exitOverride();
  register(program);
  const stderr: string[] = [];
  vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  vi.spyOn(process.stderr, 'write').mockImplementation((text) => stderr.push(String(text)) > 0);
  await program.parseAsync(['diagnose', ...args], { from: 'user' });
  return { exitCode: process.exitCode === undefined ? undefined : Number(process.exitCode), stderr: stderr.join('') };
}

describe('diagnose --from: the exit code when nothing is active', () => {
  let bundle: string;
  beforeEach(() => {
    bundle = mkdtempSync(join(tmpdir(), 'cbj-bundle-'));
    copyFileSync(join(FIXTURES, 'bundles/gce-guest-local-route/cluster.json'), join(bundle, 'cluster.json'));
  });
  afterEach(() => {
    vi.restoreAllMocks();
    process.exitCode = undefined;
    rmSync(bundle, { recursive: true, force: true });
  });

  it('is 2 for a bundle without conntrack: nothing could be shown active, nor ruled out', async () => {
    const { exitCode, stderr } = await diagnose(['--from', bundle]);
    expect(exitCode).toBe(2);
    expect(stderr).toContain('diagnose: conntrack not read');
  });

  it('is 0 for a bundle whose conntrack shows no loop', async () => {
    copyFileSync(join(FIXTURES, 'text/conntrack-L.txt'), join(bundle, 'conntrack.txt'));
    expect(await diagnose(['--from', bundle, '--json'])).toEqual({ exitCode: 0, stderr: '' });
  });
});
