// GET /evidence?watch=N on the agent's HTTP server: a quiet watch lasts its length, past the server's stall timeout.

import type { Server } from 'node:http';
import { request } from 'node:http';
import { type AddressInfo, createConnection, type Socket } from 'node:net';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { ConntrackTable } from '../../../src/agent/conntrack-table.js';
import { type EvidenceAccess, evidenceRoute } from '../../../src/agent/evidence-http.js';
import { EvidenceAnswers } from '../../../src/agent/evidence-server.js';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments } from '../../../src/cluster/file.js';
import { clusterList, LAB } from '../../../src/demo/lab.js';
import { createMetricsServer } from '../../../src/export/server.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';

const closers: (() => void)[] = [];
afterEach(() => closers.splice(0).forEach((c) => c()));

const user = { username: 'alice', groups: [] };
const access: EvidenceAccess = {
  relayUser: 'relay',
  authenticate: async () => ({ ok: true, user, tokenKey: 'k' }),
  authorize: async () => ({ ok: true, user }),
};

/** A pod's connection to the lab's VIP. */
const toVip = (id: number): ConntrackEntry => ({
  family: 4,
  proto: 'tcp',
  orig: { src: LAB.clientPod, sport: 1024 + id, dst: LAB.vip, dport: 80, protoNum: 6 },
  reply: { src: LAB.vip, sport: 80, dst: LAB.node1, dport: 1024 + id, protoNum: 6 },
  tcpState: 'ESTABLISHED',
  status: 2,
  statusFlags: ['SEEN_REPLY'],
  timeoutS: 100,
  mark: 0,
  zone: 0,
  id,
});

/** The agent's :9811 server with /evidence over the lab's cluster view and a table of `entries` VIP flows. */
async function agentServer(stallTimeoutMs: number, entries = 0): Promise<{ port: number; server: Server }> {
  const view = buildClusterView(classifyDocuments([clusterList('Local')]).objects, { nodeName: LAB.node1Name });
  const table = new ConntrackTable(new ServiceIndex(view, { nodeIps: [LAB.node1], ipvsIps: [], podCidrs: [] }));
  for (let id = 1; id <= entries; id++) table.upsert(toVip(id), 0);
  const answers = new EvidenceAnswers({
    table: () => table,
    find: (ns, name) => view.services.filter((s) => s.namespace === ns && s.name === name),
    nodeName: LAB.node1Name,
  });
  const server = createMetricsServer(
    { registry: new Registry(), ready: () => true, routes: { '/evidence': evidenceRoute(access, () => answers) } },
    { stallTimeoutMs },
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => {
    server.closeAllConnections();
    server.close();
  });
  return { port: (server.address() as AddressInfo).port, server };
}

/** The lines of the answer, and whether it ended (false: the connection was cut). */
function get(port: number, path: string): Promise<{ lines: { type: string }[]; ended: boolean; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    let body = '';
    const done = (ended: boolean) => {
      const lines = body
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { type: string });
      resolve({ lines, ended, ms: Date.now() - t0 });
    };
    const req = request(
      { host: '127.0.0.1', port, path, agent: false, headers: { authorization: 'Bearer x' } },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => done(true));
        res.on('error', () => done(false));
      },
    );
    req.on('error', () => done(false));
    req.end();
  });
}

describe('GET /evidence?watch', () => {
  it('a watch with nothing new lasts its length and ends with its end line, past the stall timeout', async () => {
    const { port } = await agentServer(300);
    const answer = await get(port, '/evidence?service=lab/web&watch=2');
    expect(answer.ended).toBe(true);
    expect(answer.lines.at(-1)?.type).toBe('end');
    expect(answer.ms).toBeGreaterThanOrEqual(1900);
  });

  it('a watching reader that takes nothing is still dropped after the stall timeout', async () => {
    const { port, server } = await agentServer(300, 10_000);
    const served = new Promise<Socket>((r) => server.once('connection', r));
    const client = createConnection(port, '127.0.0.1');
    closers.push(() => client.destroy());
    client.on('error', () => {});
    client.pause();
    client.write('GET /evidence?service=lab/web&watch=60 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\r\n\r\n');
    const sock = await served;
    const t0 = Date.now();
    await new Promise((r) => (sock.destroyed ? r(0) : sock.once('close', r)));
    // The watchdog looks every stall timeout; the answer's own stall timeout (30 s) is far off.
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(sock.bytesWritten).toBeGreaterThan(100_000);
  });
});
