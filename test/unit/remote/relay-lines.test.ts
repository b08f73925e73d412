// What one agent sends cannot take the evidence relay or `evidence --all-nodes` down for every
// node: a malformed line is that node's failure, reported in place; control characters reach the
// terminal escaped; the relay holds a bounded amount of unfinished lines across all answers.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runAllNodes } from '../../../src/cli/evidence-remote.js';
import type { AgentPod } from '../../../src/remote/agent-pods.js';
import { relayRoute, TOKEN_HEADER } from '../../../src/remote/relay.js';

const SERVICE = {
  namespace: 'lab',
  name: 'web',
  vips: ['10.96.0.10'],
  ports: [{ port: 80, protocol: 'TCP' }],
  endpoints: [{ address: '10.244.1.5', port: 8080 }],
};
const serviceLine = (node: string) => JSON.stringify({ type: 'service', node, service: SERVICE });
const entryLine = (line: string) =>
  JSON.stringify({ type: 'entry', class: 'client', line, firstSeen: '2026-11-28T17:00:00Z' });
const endLine = (entries: number) => JSON.stringify({ type: 'end', entries });

const servers: Server[] = [];
const scratch: string[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  for (const d of scratch.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function listen(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  host = '127.0.0.1',
  port = 0,
): Promise<number> {
  const s = createServer(handler);
  servers.push(s);
  await new Promise<void>((resolve, reject) => {
    s.once('error', reject);
    s.listen(port, host, () => resolve());
  });
  return (s.address() as AddressInfo).port;
}

/** `evidence --all-nodes` through a relay (this test's API server proxy) that answers `lines`. */
async function allNodesVia(lines: string[]): Promise<{ code: number; text: string }> {
  const port = await listen((req, res) => {
    expect(req.url).toMatch(/^\/api\/v1\/namespaces\/clbprobe\/services\/clbprobe-evidence\/proxy\/evidence\?/);
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson' }).end(lines.map((l) => `${l}\n`).join(''));
  });
  const dir = mkdtempSync(join(tmpdir(), 'cbh-relay-'));
  scratch.push(dir);
  const kubeconfig = join(dir, 'config');
  writeFileSync(
    kubeconfig,
    `apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: c, cluster: {server: "http://127.0.0.1:${port}", insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n`,
  );
  let text = '';
  const code = await runAllNodes({
    service: 'lab/web',
    watchS: 0,
    json: false,
    kubeconfig,
    namespace: 'clbprobe',
    selector: 'app=clbprobe',
    container: 'agent',
    concurrency: 4,
    timeoutS: 10,
    via: 'relay',
    write: (t) => (text += t),
  });
  return { code, text };
}

describe('evidence --all-nodes through the relay', () => {
  it("reports a malformed line as its node's failure and prints every other node", async () => {
    const withNode = (node: string, line: string) =>
      JSON.stringify({ node, pod: `agent-${node}`, ...JSON.parse(line) });
    const { code, text } = await allNodesVia([
      withNode('n1', serviceLine('n1')),
      withNode('n1', entryLine('tcp ESTABLISHED src=10.244.1.7 dst=10.96.0.10')),
      withNode('n1', endLine(1)),
      'null',
      JSON.stringify({ node: 'n2', pod: 'agent-n2', type: 'service' }),
      withNode('n2', endLine(0)),
      withNode('n3', serviceLine('n3')),
      withNode('n3', endLine(0)),
      JSON.stringify({
        type: 'summary',
        answered: 3,
        failed: 0,
        nodes: ['n1', 'n2', 'n3'].map((node) => ({
          node,
          pod: `agent-${node}`,
          status: 'ok',
          entries: node === 'n1' ? 1 : 0,
        })),
      }),
    ]);
    expect(code).toBe(1);
    expect(text).toMatch(/^n1 +2026-11-28T17:00:00Z client +now {2}tcp ESTABLISHED src=10\.244\.1\.7/m);
    expect(text).toMatch(/^n3 +# lab\/web on n3/m);
    expect(text).toMatch(/^n2 +# error: the agent sent a service line without its fields/m);
    expect(text).toMatch(/^\? +# error: the relay sent a line that is not an object: null/m);
    expect(text).toMatch(/^# summary: 2 of 4 nodes answered$/m);
    expect(text).toMatch(/^# n1 .* 1 entries$/m);
    expect(text).toMatch(/^# n2 .* failed: the agent sent a service line without its fields/m);
  });

  it("shows an agent's control characters instead of obeying them", async () => {
    const attack = '\x1b[2J\x1b[H0 active\r\x9b31m\u202e';
    const { text } = await allNodesVia([
      JSON.stringify({ node: 'n1\x1b]0;owned\x07', pod: 'p', ...JSON.parse(entryLine(`tcp ${attack}`)) }),
      JSON.stringify({ node: 'n1', pod: 'p', type: 'error', message: `refused ${attack}` }),
      JSON.stringify({
        type: 'summary',
        answered: 0,
        failed: 1,
        nodes: [{ node: 'n1', pod: 'p', status: 'failed', entries: 0, error: `boom ${attack}` }],
      }),
    ]);
    expect(text).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]/);
    expect(text).toContain('tcp \\x1b[2J\\x1b[H0 active\\x0d\\x9b31m\\u202e');
    expect(text).toContain('n1\\x1b]0;owned\\x07');
    expect(text).toContain('failed: boom \\x1b[2J');
  });
});

/** A fake agent at `ip`:`port` that answers /evidence with `answer(res)`. */
async function agentAt(ip: string, port: number, answer: (res: ServerResponse) => void): Promise<number> {
  return listen(
    (_req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      answer(res);
    },
    ip,
    port,
  );
}

const pod = (node: string, ip: string): AgentPod => ({
  name: `agent-${node}`,
  node,
  phase: 'Running',
  ready: true,
  containers: ['agent'],
  deleting: false,
  ip,
});

/** The relay's route over `pods`, asked once; its NDJSON answer, parsed. */
async function askRelay(pods: AgentPod[], agentPort: number, lineBudget?: number): Promise<Record<string, unknown>[]> {
  const options = {
    check: async () => ({ ok: true as const, user: { username: 'alice', groups: [] } }),
    listPods: async () => pods,
    container: 'agent',
    agentPort,
    concurrency: 4,
    maxRequests: 4,
    maxRequestsPerCaller: 4,
    nodeToken: async () => 'relay-token',
    ...(lineBudget ? { lineBudget } : {}),
  };
  const port = await listen(relayRoute(options));
  const body = await new Promise<string>((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path: '/evidence?service=lab/web', headers: { [TOKEN_HEADER]: 'Bearer alice' } },
      (res) => {
        let b = '';
        res
          .setEncoding('utf8')
          .on('data', (d: string) => (b += d))
          .on('end', () => resolve(b));
      },
    );
    req.on('error', reject).end();
  });
  return body
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe('the evidence relay', () => {
  it('fails only the node whose agent sent a malformed line, and forwards none of it', async () => {
    const port = await agentAt('127.0.0.1', 0, (res) =>
      res.end(`${serviceLine('n1')}\nnull\n{"type":"entry"}\n${endLine(0)}\n`),
    );
    await agentAt('127.0.0.2', port, (res) => res.end(`${serviceLine('n2')}\n${entryLine('tcp ok')}\n${endLine(1)}\n`));
    const lines = await askRelay([pod('n1', '127.0.0.1'), pod('n2', '127.0.0.2')], port);
    const summary = lines.at(-1) as { type: string; nodes: { node: string; status: string; error?: string }[] };
    expect(summary.type).toBe('summary');
    expect(summary.nodes.map((n) => [n.node, n.status])).toEqual([
      ['n1', 'failed'],
      ['n2', 'ok'],
    ]);
    expect(summary.nodes[0]!.error).toMatch(/no known type: null/);
    expect(lines.filter((l) => l.node === 'n1').map((l) => l.type)).toEqual(['service', 'end']);
    expect(lines.filter((l) => l.node === 'n2').map((l) => l.type)).toEqual(['service', 'entry', 'end']);
  });

  it('holds at most its line budget of unfinished lines across all answers at once', async () => {
    const half = 60_000;
    // Each agent sends half of a long entry, waits, then the rest: both halves are held at once.
    const slow =
      (node: string) =>
      (res: ServerResponse): void => {
        const line = entryLine('x'.repeat(2 * half));
        res.write(`${serviceLine(node)}\n${line.slice(0, half)}`);
        setTimeout(() => res.end(`${line.slice(half)}\n${endLine(1)}\n`), 300);
      };
    const port = await agentAt('127.0.0.1', 0, slow('n1'));
    await agentAt('127.0.0.2', port, slow('n2'));
    const pods = [pod('n1', '127.0.0.1'), pod('n2', '127.0.0.2')];
    const within = await askRelay(pods, port, 100_000);
    const results = (within.at(-1) as { nodes: { node: string; status: string; error?: string }[] }).nodes;
    expect(results.map((r) => r.status).sort()).toEqual(['failed', 'ok']);
    expect(results.find((r) => r.status === 'failed')?.error).toMatch(
      /holds 100000 characters of unfinished lines at most/,
    );
    // What a finished answer held is given back: the next request gets the whole budget again.
    const roomy = await askRelay(pods, port, 4 * half);
    expect((roomy.at(-1) as { nodes: { status: string }[] }).nodes.map((r) => r.status)).toEqual(['ok', 'ok']);
  });
});
