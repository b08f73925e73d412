// The relay's EventRecorder against an agent on loopback that answers /findings as the test says: the last Event on
// a Service says its state, and one not recorded (quiet period, rate limit, an API error) is tried again next round.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toAgentPod } from '../../../src/remote/agent-pods.js';
import { EventRecorder, type LoopEvent } from '../../../src/remote/events.js';

/** The Services the agent reports an active L4 loop for. */
let looping: string[] = [];
let server: Server;
let port = 0;

beforeAll(async () => {
  server = createServer((_req, res) => {
    const finding = (name: string) =>
      JSON.stringify({
        type: 'finding',
        service: { namespace: 'shop', name },
        port: { port: 80, protocol: 'TCP' },
        mechanism: 'L4-loop',
        severity: 'active',
        summary: 's',
        evidence: [],
        remedy: 'r',
      });
    res.end([...looping.map(finding), JSON.stringify({ type: 'end', version: 'test' }), ''].join('\n'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise((r) => server.close(r)));

const MINUTE = 60_000;

/** A recorder at minute `clock.now`, whose create() fails while `clock.failing`; `said` lists what it created. */
function recorder(o: { perMinute?: number; burst?: number } = {}) {
  const clock = { now: 0, failing: false };
  const said: string[] = [];
  const pod = toAgentPod(
    {
      metadata: { name: 'agent-1' },
      spec: { nodeName: 'n1', containers: [{ name: 'agent' }] },
      status: { phase: 'Running', podIP: '127.0.0.1', containerStatuses: [{ name: 'agent', ready: true }] },
    },
    'agent',
  );
  const rec = new EventRecorder({
    listPods: async () => [pod],
    container: 'agent',
    concurrency: 2,
    agentPort: port,
    nodeToken: async () => 'token',
    agentTimeoutMs: 5000,
    maxAnswerBytes: 1 << 20,
    create: async (e: LoopEvent) => {
      if (clock.failing) throw new Error('500 etcdserver: request timed out');
      said.push(`${clock.now / MINUTE} ${e.type} ${e.service}`);
      return 'created';
    },
    quietPeriodMs: 10 * MINUTE,
    perMinute: o.perMinute ?? 30,
    burst: o.burst ?? 60,
    now: () => clock.now,
  });
  /** One round at minute m with these Services looping. */
  const round = async (m: number, services: string[]) => {
    clock.now = m * MINUTE;
    looping = services;
    await rec.poll();
  };
  return { rec, clock, said, round };
}

describe('EventRecorder', () => {
  it('a loop that comes back within the quiet period gets its Warning once the period is over', async () => {
    const { said, round } = recorder();
    await round(0, ['api']);
    await round(1, []);
    for (let m = 2; m <= 12; m++) await round(m, ['api']);
    expect(said).toEqual(['0 Warning api', '1 Normal api', '10 Warning api']);
  });

  it('a Warning the API server failed to create is created at a later round', async () => {
    const { said, clock, round } = recorder();
    clock.failing = true;
    await round(0, ['web']);
    clock.failing = false;
    await round(1, ['web']);
    await round(2, ['web']);
    expect(said).toEqual(['1 Warning web']);
  });

  it('Services over the rate limit are announced at later rounds; a loop never announced ends without a word', async () => {
    const { rec, said, round } = recorder({ perMinute: 1, burst: 2 });
    await round(0, ['a', 'b', 'c']);
    expect(said).toEqual(['0 Warning a', '0 Warning b']);
    await round(1, ['a', 'b', 'c']);
    expect(said).toEqual(['0 Warning a', '0 Warning b', '1 Warning c']);
    expect(rec.counts.limited).toBe(1);
    await round(2, ['d']);
    await round(3, []);
    // a, b and c end (one a minute); d's Warning and end were never recorded, so d gets neither.
    for (let m = 4; m <= 8; m++) await round(m, []);
    expect(said.filter((s) => s.includes('Normal'))).toEqual(['2 Normal a', '3 Normal b', '4 Normal c']);
    expect(said.some((s) => s.endsWith(' d'))).toBe(false);
  });
});
