// The evidence socket against callers that misbehave (issue 16, defects 3, 5 and 8): a real Unix
// socket, the agent's real conntrack table holding 21k entries of the lab's Service.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createConnection, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConntrackTable } from '../../../src/agent/conntrack-table.js';
import {
  EvidenceAnswers,
  type EvidenceBackend,
  type EvidenceLimits,
  parseEvidenceRequest,
  startEvidenceServer,
} from '../../../src/agent/evidence-server.js';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments } from '../../../src/cluster/file.js';
import type { ClusterView } from '../../../src/cluster/types.js';
import { clusterList, LAB } from '../../../src/demo/lab.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';
import { until } from '../../support/wait.js';

const dir = mkdtempSync(join(tmpdir(), 'cbh-evidence-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let view: ClusterView;
let table: ConntrackTable;
const ENTRIES = 21_000;
const entry = (id: number): ConntrackEntry => {
  const sport = 1024 + (id % 60_000);
  const src = `10.244.1.${10 + Math.floor(id / 60_000)}`;
  return {
    family: 4,
    proto: 'tcp',
    orig: { src, sport, dst: LAB.vip, dport: 80, protoNum: 6 },
    reply: { src: LAB.vip, sport: 80, dst: src, dport: sport, protoNum: 6 },
    tcpState: 'SYN_SENT',
    status: 0,
    statusFlags: [],
    timeoutS: 100,
    mark: 0,
    zone: 0,
    id,
  };
};

beforeAll(() => {
  const { objects } = classifyDocuments([clusterList('Local')]);
  view = buildClusterView(objects, { nodeName: LAB.node1Name });
  table = new ConntrackTable(new ServiceIndex(view, { nodeIps: [LAB.node1], ipvsIps: [], podCidrs: [LAB.podCidr] }));
  for (let i = 1; i <= ENTRIES; i++) table.upsert(entry(i), i);
  expect(table.size).toBe(ENTRIES);
});

const backend = (): EvidenceBackend => ({
  table: () => table,
  find: (ns, name, port) =>
    view.services.filter((s) => s.namespace === ns && s.name === name && (port === undefined || s.port === port)),
  nodeName: 'node1',
});

const servers: Server[] = [];
const clients: Socket[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

let seq = 0;
/** A server, and the server side of each connection it accepts (to look at what waits for the reader). */
async function start(limits: Partial<EvidenceLimits> = {}) {
  const path = join(dir, `e${seq++}.sock`);
  const server = await startEvidenceServer(path, new EvidenceAnswers(backend(), limits));
  servers.push(server);
  const accepted: Socket[] = [];
  server.prependListener('connection', (s: Socket) => accepted.push(s));
  return { path, server, accepted };
}

function connect(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = createConnection(path);
    clients.push(s);
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

/** Sends a request line and reads the whole answer. */
async function ask(path: string, req: unknown): Promise<Record<string, any>[]> {
  const s = await connect(path);
  s.write(`${typeof req === 'string' ? req : JSON.stringify(req)}\n`);
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(c as Buffer);
  return Buffer.concat(chunks)
    .toString('utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, any>);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('evidence socket: answers', () => {
  it('caps entries per answer and says so in the end line', async () => {
    const { path } = await start();
    const lines = await ask(path, { service: 'lab/web' });
    expect(lines[0]).toMatchObject({ type: 'service', node: 'node1' });
    expect(lines.filter((l) => l.type === 'entry')).toHaveLength(10_000);
    expect(lines.at(-1)).toEqual({
      type: 'end',
      entries: 10_000,
      truncated: true,
      notSent: 11_000,
      reason: 'not sent: 11000 over the limit of 10000 entries per answer',
    });
  });

  it('under the cap: every entry, oldest first, no truncation', async () => {
    const { path } = await start({ maxEntries: 50_000 });
    const lines = await ask(path, { service: 'lab/web', port: 80 });
    const entries = lines.filter((l) => l.type === 'entry');
    expect(entries).toHaveLength(ENTRIES);
    expect(entries[0]!.entry.id).toBe(1);
    expect(lines.at(-1)).toEqual({ type: 'end', entries: ENTRIES });
  });

  it('writes only as fast as the reader reads: 4 callers that never read hold a socket buffer each, not 20 MB', async () => {
    const { path, accepted } = await start({ maxEntries: 50_000 });
    const idle = await Promise.all([0, 1, 2, 3].map(() => connect(path)));
    for (const s of idle) {
      s.pause();
      s.write('{"service":"lab/web"}\n');
    }
    await until('4 answers started', 3000, () =>
      accepted.length === 4 && accepted.every((s) => s.bytesWritten > 0) ? true : undefined,
    );
    await sleep(300);
    for (const s of accepted) expect(s.writableLength).toBeLessThan(64 << 10);
    // Each still gets its whole answer once it reads.
    const one = idle[0]!;
    const chunks: Buffer[] = [];
    one.resume();
    for await (const c of one) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).toString().trimEnd().split('\n').at(-1)).toBe(`{"type":"end","entries":${ENTRIES}}`);
  });

  it('new entries stream during a watch; past the cap they are counted, not sent', async () => {
    const { path } = await start({ maxEntries: 3 });
    const s = await connect(path);
    s.write('{"service":"lab/web","watchS":0.4}\n');
    const chunks: Buffer[] = [];
    const done = (async () => {
      for await (const c of s) chunks.push(c as Buffer);
    })();
    await sleep(100);
    table.upsert(entry(ENTRIES + 1), Date.now());
    await done;
    table.event('DESTROY', entry(ENTRIES + 1), Date.now());
    const lines = Buffer.concat(chunks)
      .toString()
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, any>);
    expect(lines.filter((l) => l.type === 'entry')).toHaveLength(3);
    expect(lines.at(-1)).toEqual({
      type: 'end',
      entries: 3,
      truncated: true,
      notSent: ENTRIES - 3 + 1,
      reason: `not sent: ${ENTRIES - 2} over the limit of 3 entries per answer`,
    });
  });
});

describe('evidence socket: limits', () => {
  it('a caller that stops reading is dropped after stallTimeoutMs', async () => {
    const { path, accepted } = await start({ stallTimeoutMs: 300 });
    const s = await connect(path);
    s.pause();
    s.write('{"service":"lab/web"}\n');
    await until('the server side closed', 3000, () => (accepted[0]?.destroyed ? true : undefined));
  });

  it('a caller that never asks is closed after requestTimeoutMs, with the reason', async () => {
    const { path } = await start({ requestTimeoutMs: 200 });
    const s = await connect(path);
    const chunks: Buffer[] = [];
    const t0 = Date.now();
    for await (const c of s) chunks.push(c as Buffer);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(JSON.parse(Buffer.concat(chunks).toString())).toEqual({ type: 'error', message: 'no request within 0.2 s' });
  });

  it('at most maxAnswers answers at once; the next caller is told the socket is busy', async () => {
    const { path } = await start({ maxAnswers: 2 });
    for (let i = 0; i < 2; i++) {
      const s = await connect(path);
      s.pause();
      s.write('{"service":"lab/web"}\n');
    }
    await sleep(100);
    expect(await ask(path, { service: 'lab/web' })).toEqual([
      { type: 'error', message: 'busy: 2 evidence answers in progress; try again' },
    ]);
  });

  it('at most maxWatches watches; watches that never read do not keep a plain request out', async () => {
    const { path } = await start({ maxWatches: 2, maxAnswers: 2, maxEntries: 5 });
    for (let i = 0; i < 2; i++) {
      const s = await connect(path);
      s.pause();
      s.write('{"service":"lab/web","watchS":60}\n');
    }
    await sleep(200);
    expect(await ask(path, { service: 'lab/web', watchS: 1 })).toEqual([
      { type: 'error', message: 'busy: 2 evidence watches in progress; try again, or ask without --watch' },
    ]);
    expect((await ask(path, { service: 'lab/web' })).at(-1)).toMatchObject({
      type: 'end',
      entries: 5,
      truncated: true,
    });
  });

  it('at most maxConnections open; the oldest silent one gives way, so a real caller still gets in', async () => {
    const { path, server } = await start({ maxConnections: 8 });
    const silent = await Promise.all(Array.from({ length: 8 }, () => connect(path)));
    const closed = new Promise((r) => silent[0]!.once('close', r));
    const lines = await ask(path, { service: 'lab/web', port: 80 });
    expect(lines.at(-1)).toMatchObject({ type: 'end', entries: 10_000, truncated: true });
    await closed;
    expect(await new Promise((r) => server.getConnections((_e, n) => r(n)))).toBeLessThanOrEqual(8);
  });

  it('the socket is 0600 from the moment it exists, whatever the umask', async () => {
    const path = join(dir, 'mode.sock');
    const old = process.umask(0);
    let started: Promise<Server>;
    try {
      started = startEvidenceServer(path, new EvidenceAnswers(backend()));
    } finally {
      process.umask(old);
    }
    // Synchronously after the bind, before any callback could chmod it.
    expect(statSync(path).mode & 0o777).toBe(0o600);
    servers.push(await started);
  });
});

describe('evidence requests (defect 8)', () => {
  it('a null, non-object or mistyped request gets a clear error, never an internal one', async () => {
    const { path } = await start();
    const cases: [string, string][] = [
      ['null', 'the request must be a JSON object like {"service":"NAMESPACE/NAME"}'],
      ['[1]', 'the request must be a JSON object like {"service":"NAMESPACE/NAME"}'],
      ['"lab/web"', 'the request must be a JSON object like {"service":"NAMESPACE/NAME"}'],
      ['{"service":"lab/web","port":"80"}', '"port" must be a number from 1 to 65535, not "80"'],
      ['{"service":"lab/web","port":0}', '"port" must be a number from 1 to 65535, not 0'],
      ['{"service":"lab/web","watchS":"1"}', '"watchS" must be a number of seconds, not "1"'],
      ['{"service":7}', 'the request has no "service" text (NAMESPACE/NAME)'],
      ['{"service":"web"}', '"service" must be NAMESPACE/NAME, not "web"'],
      ['{"service":', 'the request is not JSON (want {"service":"NAMESPACE/NAME"} and a newline)'],
    ];
    for (const [req, message] of cases) expect(await ask(path, req), req).toEqual([{ type: 'error', message }]);
    expect(await ask(path, { service: 'lab/nope' })).toEqual([
      { type: 'error', message: "no LoadBalancer Service lab/nope in this node's cluster view" },
    ]);
    expect(await ask(path, 'x'.repeat(5000))).toEqual([{ type: 'error', message: 'request longer than 4096 bytes' }]);
  });

  it('parseEvidenceRequest caps watchS', () => {
    expect(parseEvidenceRequest('{"service":"a/b","watchS":1e9}')).toEqual({ service: 'a/b', watchS: 3600 });
  });
});

describe('clbprobe evidence (the client)', () => {
  const ROOT = join(import.meta.dirname, '../../..');
  /** Runs `clbprobe evidence ARGS | head -N` in bash; the CLI's exit status, its stderr, and what head printed. */
  function evidenceToHead(args: string[], n: number): Promise<{ status: number; stderr: string; stdout: string }> {
    const cmd = `set -o pipefail; node --import tsx src/cli/main.ts evidence ${args.join(' ')} 2>"$ERRFILE" | head -${n}; echo "status=\${PIPESTATUS[0]}" >&2; cat "$ERRFILE" >&2`;
    return new Promise((resolve, reject) => {
      const p = spawn('bash', ['-c', cmd], { cwd: ROOT, env: { ...process.env, ERRFILE: join(dir, `err${seq++}`) } });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      p.on('error', reject);
      p.on('close', () => {
        const m = /^status=(\d+)\n/.exec(stderr);
        resolve({ status: Number(m?.[1]), stderr: stderr.replace(/^status=\d+\n/, ''), stdout });
      });
    });
  }

  it('`clbprobe evidence | head` stops quietly when head has read enough (no EPIPE stack trace)', async () => {
    const { path } = await start({ maxEntries: 50_000 });
    const r = await evidenceToHead(['--service', 'lab/web', '--socket', path, '--json'], 2);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout.trimEnd().split('\n')).toHaveLength(2);
  }, 30_000);

  it('says when the answer was truncated', async () => {
    const { path } = await start({ maxEntries: 5 });
    const r = await evidenceToHead(['--service', 'lab/web', '--socket', path], 100);
    expect(r.status).toBe(0);
    expect(r.stdout.trimEnd().split('\n').at(-1)).toBe(
      `# 5 entries (truncated: not sent: ${ENTRIES - 5} over the limit of 5 entries per answer)`,
    );
  }, 30_000);
});
