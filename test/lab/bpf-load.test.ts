// Loading the eBPF programs (native/bpf.c, the compiled addon and objects of dist/ and build/)
// in a child process, as the agent loads them:
// - under a CPU profiler: node --cpu-prof sends SIGPROF every interval, and the verifier gives up
//   with EAGAIN whenever a signal is pending; libbpf's few retries all failed (0 of 20 loads at a
//   100 µs interval) until the load blocked signals;
// - without capabilities: the refusal keeps libbpf's explanation and ends with the errno's text
//   (a 256-byte message used to cut both).
// Nothing is attached: no interface or namespace is touched.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isRoot } from '../support/netns.js';

const ROOT = join(import.meta.dirname, '../..');
const LOADS = 10;

/** Loads and closes the counter program LOADS times; prints one JSON line of what happened. */
const CHILD = `
const { bpfObjectPath } = await import(${JSON.stringify(join(ROOT, 'dist/src/capture/ebpf.js'))});
const { bpfAddon } = await import(${JSON.stringify(join(ROOT, 'dist/src/native/bpf.js'))});
const a = bpfAddon();
let loaded = 0;
const errors = [];
for (let i = 0; i < ${LOADS}; i++) {
  const o = a.bpfObjectOpen(bpfObjectPath(false));
  try { a.bpfObjectLoad(o); loaded++; } catch (e) { errors.push({ message: e.message, code: e.code }); }
  a.bpfObjectClose(o);
}
process.stdout.write(JSON.stringify({ loaded, errors }) + '\\n');
`;

/** Runs CHILD on this node with nodeFlags, behind the command prefix (e.g. setpriv ... --). */
function runChild(
  prefix: string[],
  nodeFlags: string[],
): { loaded: number; errors: { message: string; code: string }[] } {
  const [cmd, ...args] = [...prefix, process.execPath, ...nodeFlags, '--input-type=module', '-e', CHILD];
  const r = spawnSync(cmd!, args, {
    encoding: 'utf8',
    timeout: 60_000,
  });
  if (r.status !== 0) throw new Error(`child exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as {
    loaded: number;
    errors: { message: string; code: string }[];
  };
}

describe.skipIf(!isRoot)('loading the eBPF counter program', () => {
  it('succeeds every time under a CPU profiler sampling every 100 µs (signals do not abort the verifier)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cbbl-prof-'));
    try {
      const r = runChild([], ['--cpu-prof', '--cpu-prof-dir', dir, '--cpu-prof-interval', '100']);
      expect(r.errors.map((e) => `${e.code}: ${e.message}`)).toEqual([]);
      expect(r.loaded).toBe(LOADS);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("without capabilities: EPERM, libbpf's explanation, and the errno's text at the end", () => {
    const r = runChild(['setpriv', '--bounding-set', '-all', '--inh-caps', '-all', '--'], []);
    expect(r.loaded).toBe(0);
    expect(r.errors).toHaveLength(LOADS);
    const e = r.errors[0]!;
    expect(e.code).toBe('EPERM');
    expect(e.message).toMatch(/^bpf_object__load \(.*Couldn't load trivial BPF program.*\): Operation not permitted$/);
  });
});
