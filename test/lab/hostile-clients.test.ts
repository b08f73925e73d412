// Issue 16, defect 5: the agent (the real one, `clbprobe agent`, in a network namespace of its own:
// addresses, conntrack and NAT read from the kernel, the cluster from a file) keeps /healthz, its
// sources and evidence answers while 20,000 hostile connections are made to it: 10,000 to the
// metrics port (half silent, half sending half a request's headers) and 10,000 to the evidence
// socket (half silent, half asking for a watch and never reading), each re-opened once when the
// agent closes it.
//
// File descriptors: this box's hard limit is 20,000 per process, so the connections come from two
// processes of 10,000 each. The agent runs with a soft limit of 4,096 (prlimit): without the caps
// it ran out of descriptors (EMFILE) long before 20,000; with them it holds a few hundred whatever
// the clients do. (In a pod the limit is the runtime's, often 1M: the caps are what bounds memory.)
// Namespaces are cbh-*.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterList } from '../../src/demo/lab.js';
import { parseSamples } from '../../src/export/parse-samples.js';
import { agentContainer } from '../support/daemonset.js';
import { isRoot, Netns } from '../support/netns.js';
import { shippedAgent } from '../support/shipped-agent.js';
import { until } from '../support/wait.js';

const ROOT = join(import.meta.dirname, '../..');
const PORT = 19811;
const PER_PROCESS = 10_000;

describe.skipIf(!isRoot)('the agent under 20,000 hostile connections', () => {
  let ns: Netns;
  let dir: string;
  let agent: ChildProcess | undefined;
  let agentLog = '';
  const hostile: { p: ChildProcess; out: string }[] = [];
  const sock = () => join(dir, 'evidence.sock');

  /** curl inside the namespace, not blocking this process (the evidence server is not in it, but timers are). */
  const curl = (path: string): Promise<string> =>
    new Promise((resolve) => {
      const p = spawn('ip', [
        'netns',
        'exec',
        ns.name,
        'curl',
        '-sS',
        '--max-time',
        '5',
        '-w',
        '\n%{http_code}',
        `http://127.0.0.1:${PORT}${path}`,
      ]);
      let out = '';
      p.stdout.on('data', (b: Buffer) => (out += b.toString()));
      p.stderr.on('data', (b: Buffer) => (out += b.toString()));
      p.on('close', () => resolve(out));
    });

  /** One evidence request over the socket; the answer's lines. */
  const evidence = (): Promise<Record<string, unknown>[]> =>
    new Promise((resolve, reject) => {
      const s = createConnection(sock());
      const parts: Buffer[] = [];
      s.on('error', reject);
      s.on('data', (b: Buffer) => parts.push(b));
      s.on('end', () =>
        resolve(
          Buffer.concat(parts)
            .toString()
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l) as Record<string, unknown>),
        ),
      );
      s.write('{"service":"lab/web"}\n');
      setTimeout(() => (s.destroy(), reject(new Error('no evidence answer in 10 s'))), 10_000).unref();
    });

  const agentPid = (): string => String(agent!.pid);
  const fds = (): number => readdirSync(`/proc/${agentPid()}/fd`).length;

  beforeAll(async () => {
    ns = Netns.create('cbh-');
    dir = mkdtempSync(join(tmpdir(), 'cbh-hostile-'));
    writeFileSync(join(dir, 'cluster.json'), JSON.stringify(clusterList('Local')));
    // prlimit then exec: the agent's own pid is the child's.
    const shipped = shippedAgent(
      [
        '--node-name',
        'node1',
        '--cluster-file',
        join(dir, 'cluster.json'),
        '--listen',
        `127.0.0.1:${PORT}`,
        '--evidence-socket',
        sock(),
        '--capture',
        'off',
        '--log-level',
        'warn',
      ],
      'node1',
    );
    agent = spawn(
      'ip',
      ['netns', 'exec', ns.name, 'prlimit', '--nofile=4096:4096', '--', shipped.node, ...shipped.argv],
      {
        cwd: ROOT,
        env: shipped.env,
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    agent.stderr!.on('data', (b: Buffer) => (agentLog += b.toString()));
    await until('/readyz', 30_000, async () => ((await curl('/readyz')).endsWith('\n200') ? true : undefined), 300);
  }, 60_000);

  afterAll(() => {
    for (const h of hostile) h.p.kill('SIGKILL');
    agent?.kill('SIGKILL');
    ns?.delete();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const attack = (target: string, count: number, manner: string) => {
    const p = spawn(
      'ip',
      [
        'netns',
        'exec',
        ns.name,
        'prlimit',
        '--nofile=20000:20000',
        '--',
        process.execPath,
        join(import.meta.dirname, 'hostile-clients.mjs'),
        target,
        String(count),
        manner,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const h = { p, out: '' };
    p.stdout!.on('data', (b: Buffer) => (h.out += b.toString()));
    hostile.push(h);
    return h;
  };

  it('/healthz, every source and evidence answers stay up; the agent holds a few hundred descriptors', async () => {
    const before = fds();
    const hs = [
      attack(String(PORT), PER_PROCESS / 2, 'silent'),
      attack(String(PORT), PER_PROCESS / 2, 'slow'),
      attack(sock(), PER_PROCESS / 2, 'silent'),
      attack(sock(), PER_PROCESS / 2, 'nonreading'),
    ];
    const stats = () =>
      hs
        .map((h) =>
          h.out
            .trim()
            .split('\n')
            .filter((l) => l.startsWith('stats'))
            .at(-1),
        )
        .join(' | ');
    await until(
      '20,000 hostile connections tried',
      60_000,
      () => (hs.every((h) => /^attempted \d+/m.test(h.out)) ? true : undefined),
      200,
    ).catch((e: Error) => {
      throw new Error(`${e.message}: ${stats()}`);
    });
    // As the kubelet sees it: a round fails when as many probes in a row fail as restart the agent.
    const { livenessFailureThreshold } = agentContainer();
    const checks: { healthz: string; tries: number; fds: number }[] = [];
    for (let i = 0; i < 5; i++) {
      let healthz = '';
      let tries = 0;
      while (tries < livenessFailureThreshold && !healthz.endsWith('\n200')) {
        healthz = await curl('/healthz');
        tries++;
      }
      checks.push({ healthz, tries, fds: fds() });
      expect(healthz, `round ${i}, ${tries} tries; agent log:\n${agentLog.slice(-2000)}`).toMatch(/\n200$/);
      await new Promise((r) => setTimeout(r, 500));
    }
    const metrics = await curl('/metrics');
    expect(metrics).toMatch(/\n200$/);
    const up = Object.fromEntries(
      parseSamples(metrics.replace(/\n200$/, ''))
        .filter((s) => s.name === 'clbprobe_source_up')
        .map((s) => [s.labels.source, s.value]),
    );
    expect(up).toMatchObject({ addresses: 1, conntrack: 1, nat: 1, cluster: 1 });
    const answer = await evidence();
    expect(answer[0]).toMatchObject({ type: 'service', node: 'node1' });
    expect(answer.at(-1)).toMatchObject({ type: 'end' });
    // 256 metrics + 32 evidence connections at most, plus the agent's own sockets and files.
    const most = Math.max(...checks.map((c) => c.fds));
    expect(most).toBeLessThan(before + 256 + 32 + 50);
    expect(agent!.exitCode).toBeNull();
    console.log(`agent descriptors: ${before} before, at most ${most} under attack; clients: ${stats()}`);
  }, 120_000);
});
