// The oldest kernel of the matrix on every run: test/vm/kernel-matrix.sh 5.10 boots Debian
// bullseye's 5.10 under qemu and runs the shipped agent there (test/vm/kernel-check.mjs): eBPF
// counters through cls_bpf, the conntrack event filter, every datapath reader, and a real loop
// counted and diagnosed. The other kernels (6.1, 6.12) are `test/vm/kernel-matrix.sh` by hand.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, PROJECT_ROOT } from './vm.js';

const TRANSCRIPT = join(PROJECT_ROOT, 'test-artifacts/kernel-5.10.txt');
const CHECKS = [
  'counters',
  'conntrack-filter',
  'source-addresses',
  'source-local-routes',
  'source-conntrack',
  'source-ipvs',
  'source-nat',
  'source-nft',
  'conntrack-dump',
  'conntrack-events',
  'ipvs-read',
  'loop-counted',
  'loop-diagnosed',
];

let line = '';
let checks = new Map<string, string>();

describe('the shipped agent on Debian 5.10 in a VM', () => {
  beforeAll(async () => {
    assertBuilt('dist/bundle/main.js', [
      'src/cli/main.ts',
      'src/capture/ebpf.ts',
      'src/capture/ebpf-maps.ts',
      'native/bpf/clbprobe.bpf.c',
    ]);
    const started = Date.now();
    const { code, out } = await new Promise<{ code: number | null; out: string }>((resolve, reject) => {
      const child = spawn('bash', [join(PROJECT_ROOT, 'test/vm/kernel-matrix.sh'), '5.10'], {
        cwd: PROJECT_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout.on('data', (b: Buffer) => (out += b));
      child.stderr.on('data', (b: Buffer) => (out += b));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, out }));
    });
    line = out.trim().split('\n').at(-1) ?? '';
    console.log(`kernel matrix, 5.10: ${line} (${Date.now() - started} ms with the kernel cache check)`);
    checks = new Map(
      readFileSync(TRANSCRIPT, 'utf8')
        .split('\n')
        .flatMap((l) => {
          const m = /^check (\S+) (ok|FAIL) (.*)$/.exec(l);
          return m ? [[m[1]!, `${m[2]} ${m[3]}`] as [string, string]] : [];
        }),
    );
    if (code !== 0 && checks.size === 0)
      throw new Error(`kernel-matrix.sh 5.10 exited ${code} before any check:\n${out.slice(-4000)}`);
  }, 900_000);

  it('passes as a whole: one PASS line with its time', () => {
    expect(line).toMatch(/^kernel 5\.10 \(5\.10\.\d+-\d+-amd64\): PASS \d+ s$/);
  });

  it.each(CHECKS)('%s', (name) => {
    expect(checks.get(name), `check ${name} (see ${TRANSCRIPT})`).toMatch(/^ok /);
  });

  it('attached through cls_bpf, as a kernel before 6.6 must', () => {
    expect(checks.get('counters')).toMatch(/^ok eBPF \(tc\) on eth0/);
  });
});
