// The IPVS reader against a real kernel: one VM boot runs
// test/vm/ipvs-scenario.sh (kube-ipvs0, a kube-proxy-like IPVS table, some
// traffic), our compiled reader and ipvsadm; here we compare them field by
// field. CLBPROBE_WRITE_FIXTURES=1 also stores what the guest produced in
// test/fixtures/ipvs/ for the VM-less unit tests (test/unit/ipvs).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { IpvsReadResult } from '../../src/kernel/ipvs/reader.js';
import { expectSameTable, IPVSADM_VIEWS } from '../unit/ipvs/same-table.js';
import { assertBuilt, type GuestResult, PROJECT_ROOT, runInGuest, sections } from './vm.js';

interface ReaderOutput {
  result: IpvsReadResult;
  replies: string[];
}

let run: GuestResult;
let views: Record<string, string>;

function readerOutput(name: string): ReaderOutput {
  const text = views[name]?.trim();
  if (!text) throw new Error(`guest printed no "${name}" section; stderr:\n${run.stderr.slice(-3000)}`);
  return JSON.parse(text) as ReaderOutput;
}

describe('IPVS reader in a VM (Debian kernel, real IPVS)', () => {
  beforeAll(async () => {
    assertBuilt('dist/src/kernel/ipvs/reader.js', [
      'src/kernel/ipvs/reader.ts',
      'src/kernel/ipvs/decode.ts',
      'src/kernel/ipvs/uapi.ts',
    ]);
    const script = readFileSync(join(PROJECT_ROOT, 'test/vm/ipvs-scenario.sh'), 'utf8');
    run = await runInGuest(script, { timeoutS: 170 });
    console.log(`ipvs VM scenario: ${run.wallMs} ms wall (boot + scenario), exit ${run.code}`);
    views = sections(run.stdout);
    if (run.code !== 0 || views.end === undefined) {
      throw new Error(
        `guest scenario failed (exit ${run.code}); stderr:\n${run.stderr.slice(-3000)}\nstdout:\n${run.stdout.slice(-2000)}`,
      );
    }
    if (process.env.CLBPROBE_WRITE_FIXTURES === '1') writeFixtures();
  }, 200_000);

  it('reads every service and real server exactly as ipvsadm shows them', () => {
    const { result } = readerOutput('reader');
    expect(result.status).toMatchObject({ source: 'ipvs', available: true });
    expectSameTable(result.snapshot!, views);
  });

  it('covers the shapes the scenario built (so the comparison is not vacuous)', () => {
    const vss = readerOutput('reader').result.snapshot!.virtualServers;
    expect(vss).toHaveLength(8);
    const forwards = new Set(vss.flatMap((v) => v.realServers.map((r) => r.forward)));
    expect([...forwards].sort()).toEqual(['masq', 'route', 'tunnel']);
    expect(new Set(vss.map((v) => v.family))).toEqual(new Set([4, 6]));
    const clusterIp = vss.find((v) => v.address === '10.96.0.10' && v.port === 80)!;
    expect(clusterIp.stats!.conns).toBeGreaterThan(0);
    expect(clusterIp.realServers.reduce((n, r) => n + r.activeConns, 0)).toBe(1);
  });

  it('reports a missing CAP_NET_ADMIN as unavailable, naming the capability', () => {
    const { result } = readerOutput('reader-unprivileged');
    expect(result.snapshot).toBeUndefined();
    expect(result.status.available).toBe(false);
    expect(result.status.reason).toMatch(/CAP_NET_ADMIN/);
  });
});

function writeFixtures(): void {
  const dir = join(PROJECT_ROOT, 'test/fixtures/ipvs');
  mkdirSync(dir, { recursive: true });
  const { replies } = readerOutput('reader');
  const header = [
    '# Raw IPVS genl replies recorded by test/vm/ipvs.test.ts (Debian 6.1 kernel in qemu) from the',
    '# table test/vm/ipvs-scenario.sh builds: "service|dest SERVICE-INDEX HEX" (netlink header included).',
  ];
  writeFileSync(join(dir, 'genl-replies.txt'), [...header, ...replies, ''].join('\n'));
  for (const v of [...IPVSADM_VIEWS, 'rate-before', 'rate-after'])
    writeFileSync(join(dir, `ipvsadm-${v}.txt`), views[v]!);
}
