// GET /evidence?watch=N on the agent's HTTP server: a quiet watch lasts its length, past the server's stall timeout.
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
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

const closers: (() => void)[] = [];
afterEach(() => closers.splice(0).forEach((c) => c()));

const user = { username: 'alice', groups: [] };
const access: EvidenceAccess = {
  relayUser: 'relay',
  authenticate: async () => ({ ok: true, user, tokenKey: 'k' }),
  authorize: async () => ({ ok: true, user }),
};

/** The agent's :9811 server with /evidence over the lab's cluster view and an empty table. */
async function agentServer(stallTimeoutMs: number): Promise<number> {
  const view = buildClusterView(classifyDocuments([clusterList('Local')]).objects, { nodeName: LAB.node1Name });
  const table = new ConntrackTable(new ServiceIndex(view, { nodeIps: [LAB.node1], ipvsIps: [], podCidrs: [] }));
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
  return (server.address() as AddressInfo).port;
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
    const port = await agentServer(300);
    const answer = await get(port, '/evidence?service=lab/web&watch=2');
    expect(answer.ended).toBe(true);
    expect(answer.lines.at(-1)?.type).toBe('end');
    expect(answer.ms).toBeGreaterThanOrEqual(1900);
  });
});
