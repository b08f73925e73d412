// `clbprobe demo` end to end (compiled CLI, real kernel): the loop is seen,
// counted by the agent (read back from its /metrics), diagnosed and fixed, and
// the lab leaves no namespace behind, also when the demo is interrupted with
// Ctrl-C (SIGINT) half-way.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isRoot } from '../support/netns.js';
import { CLI, requireBuiltCli } from '../support/run-cli.js';

const PREFIX = 'cbs-';

function leftovers(): string[] {
  const ns = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout;
  return ns.split('\n').filter((l) => l.startsWith(PREFIX));
}

function deleteLeftovers(): void {
  for (const l of leftovers()) spawnSync('ip', ['netns', 'delete', l.split(' ')[0]!]);
}

describe.skipIf(!isRoot)('clbprobe demo (compiled CLI, real kernel)', () => {
  beforeAll(() => {
    requireBuiltCli();
    expect(leftovers()).toEqual([]);
  });
  afterAll(deleteLeftovers);

  it('shows the loop, counts and diagnoses it as L4-loop with evidence, fixes it, and removes its namespaces', () => {
    const page = join(mkdtempSync(join(tmpdir(), PREFIX)), 'demo.html');
    const r = spawnSync(process.execPath, [CLI, 'demo', '--no-pause', '--netns-prefix', PREFIX, '--html', page], {
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, NO_COLOR: '1' },
    });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const out = r.stdout;
    // Step 1 starts the agent with zeroed counters, step 2 loops and the agent counts it, step 3 names it
    // with both conntrack legs, step 5 connects and loop_return stands still, step 6 has nothing active.
    const counter = (step: string, kind: string): RegExpMatchArray | null =>
      new RegExp(`clbprobe_lb_path_packets_total\\{port="80",kind="${kind}"\\} +(\\d+)(?: +\\(\\+(\\d+)\\))?`).exec(
        step,
      );
    const steps = out.split(/\n(?=\d\. )/);
    // The node is what a real kube-proxy writes: IPVS mode with the LB IP unbound (TKE), stated as such.
    expect(steps[0]).toMatch(
      /kube-proxy in IPVS mode as on TKE: 10\.0\.100\.100 is in its KUBE-LOAD-BALANCER ipset but not bound/,
    );
    expect(steps[0]).toContain("one DNAT rule stands in for the NodePort's IPVS virtual server");
    expect(out).toMatch(/INFO +proxy-mode[\s\S]*kube-proxy IPVS mode without LB-IP binding \(TKE style\)/);
    expect(steps[1]).toMatch(/^1\. Start the clbprobe agent on node1[\s\S]*counting LB-path packets with (eBPF|pcap)/);
    // Its risk findings give lab/web its series before any traffic: loop_return starts at 0.
    expect(counter(steps[1]!, 'loop_return')?.[1]).toBe('0');
    expect(steps[2]).toMatch(/^2\. The client pod connects[^\n]*\n {2}results: timeout, timeout, timeout\n/);
    const looped = counter(steps[2]!, 'loop_return');
    expect(Number(looped?.[1])).toBeGreaterThanOrEqual(3);
    expect(steps[2]).toMatch(/clbprobe_findings_active\{port="80",mechanism="L4-loop",severity="active"\} +1/);
    expect(steps[5]).toMatch(
      /^5\. The client pod connects[^\n]*\n {2}results: connected node2, connected node2, connected node2\n/,
    );
    expect(counter(steps[5]!, 'loop_return')?.slice(1, 3)).toEqual([looped![1], undefined]);
    expect(Number(counter(steps[5]!, 'to_lb')?.[2])).toBeGreaterThanOrEqual(3);
    expect(steps[5]).not.toContain('severity="active"');
    expect(out).toMatch(/ACTIVE L4-loop +TCP 80 \(http\)/);
    expect(out).toContain('conntrack outbound: tcp');
    expect(out).toContain('conntrack return leg from the uplink: tcp');
    expect(out).toMatch(/fix: .*externalTrafficPolicy: Cluster/s);
    const afterFix = out.slice(out.indexOf('6. clbprobe diagnose'));
    expect(afterFix).toContain('0 active');
    expect(afterFix).not.toContain('ACTIVE');
    expect(out).toContain('Result: loop detected (L4-loop, active; loop_return counted) and fixed');
    // The loop's page, kept after the lab is gone, with its path drawn.
    expect(out).toContain(`the loop drawn with its conntrack legs: ${page}`);
    expect(readFileSync(page, 'utf8')).toMatch(/<svg class="path"[\s\S]*skips the LB/);
    rmSync(dirname(page), { recursive: true, force: true });
    expect(leftovers()).toEqual([]);
  });

  it('removes the lab when interrupted with SIGINT while it runs', async () => {
    const child = spawn(process.execPath, [CLI, 'demo', '--no-pause', '--netns-prefix', PREFIX], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (b: Buffer) => (err += b));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    // Interrupt once the lab exists (its first step has started).
    await new Promise<void>((resolve) =>
      child.stdout.on('data', (b: Buffer) => {
        out += b;
        if (out.includes('2. The client pod connects')) resolve();
      }),
    );
    expect(leftovers().length).toBeGreaterThan(0);
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(err).toContain('SIGINT: lab removed');
    expect(leftovers()).toEqual([]);
  });
});
