// The L4 loop on a real kernel: a pod's connect to the LB VIP leaves node1,
// the LB (no SNAT) sends it back to node1's NodePort, node1 DNATs it to the
// local server pod, the reply bypasses the LB and the connect times out.
// `clbprobe diagnose` (the compiled CLI, run inside node1's namespace) must
// report L4-loop active with the two conntrack entries. With ETP=Cluster
// kube-proxy masquerades pod→LB traffic, the LB's anti-loopback sends it to
// node2, the connect works, and no loop may be reported.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Finding } from '../../src/detect/types.js';
import { createLoopLab, LAB, type LoopLab } from '../support/lab.js';
import { isRoot } from '../support/netns.js';
import { CLI, requireBuiltCli, runCli } from '../support/run-cli.js';

interface Run {
  status: number | null;
  findings: Finding[];
  warnings: string[];
  stderr: string;
}

function diagnose(lab: LoopLab, clusterFile: string): Run {
  const r = runCli(lab.node.name, ['diagnose', '--json', '--cluster-file', clusterFile, '--node-name', LAB.node1Name]);
  const out = r.stdout
    ? (JSON.parse(r.stdout) as { findings: Finding[]; warnings: string[] })
    : { findings: [], warnings: [] };
  return { status: r.status, ...out, stderr: r.stderr };
}

const l4Active = (fs: Finding[]): Finding[] => fs.filter((f) => f.mechanism === 'L4-loop' && f.severity === 'active');

describe.skipIf(!isRoot)('L4 loop in a namespace lab (real kernel, compiled CLI)', () => {
  let dir: string;
  beforeAll(() => {
    requireBuiltCli();
    dir = mkdtempSync(join(tmpdir(), 'cbd-loop-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  describe('ETP=Local: pod traffic to the VIP is not SNATed', () => {
    let lab: LoopLab;
    beforeAll(async () => {
      lab = await createLoopLab('Local');
    });
    afterAll(() => lab?.destroy());

    it('the connect loops, and diagnose reports L4-loop active with both conntrack entries', async () => {
      expect(await lab.connect(2000)).toBe('timeout');
      const run = diagnose(lab, lab.writeClusterFile(dir));
      expect(run.stderr).toBe('');
      expect(run.status).toBe(1);
      const [loop, ...more] = l4Active(run.findings);
      expect(more).toEqual([]);
      expect(loop!.service).toEqual({ namespace: 'lab', name: 'web' });
      expect(loop!.port).toEqual({ port: LAB.port, protocol: 'TCP', name: 'http' });
      const outbound = loop!.evidence.find((e) => e.startsWith('conntrack outbound:'));
      const back = loop!.evidence.find((e) => e.startsWith('conntrack return leg'));
      expect(outbound).toMatch(
        new RegExp(
          `tcp +6 \\d+ SYN_SENT src=${LAB.clientPod} dst=${LAB.vip} sport=(\\d+) dport=${LAB.port} \\[UNREPLIED\\]`,
        ),
      );
      const sport = /sport=(\d+)/.exec(outbound!)![1];
      expect(back).toContain(`src=${LAB.clientPod} dst=${LAB.node1} sport=${sport} dport=${LAB.nodePort}`);
      expect(back).toContain(`src=${LAB.serverPod} dst=${LAB.clientPod} sport=${LAB.serverPort} dport=${sport}`);
      // The precondition is shown active too: the outbound entry was not SNATed.
      expect(run.findings.some((f) => f.mechanism === 'no-SNAT' && f.severity === 'active')).toBe(true);
    });

    it('a bundle collected on the looping node gives the same diagnosis elsewhere (diagnose --from)', async () => {
      expect(await lab.connect(2000)).toBe('timeout');
      const bundle = join(dir, 'bundle');
      const clusterFile = lab.writeClusterFile(dir);
      const c = runCli(
        undefined,
        [
          'collect',
          '--netns',
          lab.node.name,
          '--out',
          bundle,
          '--cluster-file',
          clusterFile,
          '--node-name',
          LAB.node1Name,
        ],
        60_000,
      );
      expect(c.status, c.stderr).toBe(0);
      // Read in the root namespace: only files are used, nothing of this machine.
      const r = runCli(undefined, ['diagnose', '--json', '--from', bundle]);
      expect(r.status, r.stderr).toBe(1);
      const out = JSON.parse(r.stdout) as { findings: Finding[] };
      const [loop] = l4Active(out.findings);
      expect(loop!.service).toEqual({ namespace: 'lab', name: 'web' });
      expect(loop!.evidence.some((e) => e.includes(`dst=${LAB.node1} `) && e.includes(`dport=${LAB.nodePort}`))).toBe(
        true,
      );
    });
  });

  describe('ETP=Cluster: kube-proxy masquerades pod→LB traffic, the LB avoids the source node', () => {
    let lab: LoopLab;
    beforeAll(async () => {
      lab = await createLoopLab('Cluster');
    });
    afterAll(() => lab?.destroy());

    it('the connect works through node2, and diagnose reports no loop', async () => {
      expect(await lab.connect(2000)).toBe('connected node2');
      const run = diagnose(lab, lab.writeClusterFile(dir));
      expect(run.stderr).toBe('');
      expect(run.status).toBe(0);
      expect(l4Active(run.findings)).toEqual([]);
      expect(run.findings.filter((f) => f.severity === 'active')).toEqual([]);
      // The Service is known to the diagnosis (not a vacuous pass): its path is described.
      expect(run.findings.some((f) => f.service.name === 'web' && f.mechanism === 'proxy-mode')).toBe(true);
    });

    it('without CAP_NET_ADMIN conntrack is not read, so "no loop" is unknown: exit 2, not 0', () => {
      const args = ['diagnose', '--json', '--cluster-file', lab.writeClusterFile(dir), '--node-name', LAB.node1Name];
      const noCaps = ['setpriv', '--bounding-set=-all', '--inh-caps=-all', process.execPath, CLI, ...args];
      const r = spawnSync('ip', ['netns', 'exec', lab.node.name, ...noCaps], { encoding: 'utf8', timeout: 30_000 });
      expect(r.stderr).toContain('diagnose: conntrack not read');
      expect(r.status).toBe(2);
    });
  });
});
