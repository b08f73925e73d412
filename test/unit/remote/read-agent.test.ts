// readAgent, the relay's request to one agent, against an agent on loopback that holds a watch open: a caller who
// leaves while the relay mints the node's token gets no agent request started on its behalf.
import { EventEmitter } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { toAgentPod } from '../../../src/remote/agent-pods.js';
import { type AgentSink, readAgent } from '../../../src/remote/relay-common.js';

describe('readAgent', () => {
  it('asks no agent for a caller gone while the node token was minted', async () => {
    let asked = 0;
    const agent = createServer((_req, res) => {
      asked++;
      res.write('{"type":"start"}\n'); // a watch: the answer never ends by itself
    });
    await new Promise<void>((r) => agent.listen(0, '127.0.0.1', r));
    try {
      const pod = toAgentPod(
        {
          metadata: { name: 'agent-1' },
          spec: { nodeName: 'n1', containers: [{ name: 'agent' }] },
          status: { phase: 'Running', podIP: '127.0.0.1', containerStatuses: [{ name: 'agent', ready: true }] },
        },
        'agent',
      );
      // The caller's answer: it goes away 20 ms in, while the token takes 100 ms.
      const caller = Object.assign(new EventEmitter(), { destroyed: false, write: () => true });
      setTimeout(() => {
        caller.destroyed = true;
        caller.emit('close');
      }, 20);
      const started = Date.now();
      const error = await readAgent(
        {
          agentPort: (agent.address() as AddressInfo).port,
          nodeToken: () => new Promise((r) => setTimeout(() => r('token'), 100)),
        },
        pod,
        caller as AgentSink,
        { path: '/evidence?watch=3600', timeoutMs: 10_000, maxLine: 1 << 20, line: () => undefined },
      );
      expect(error).toBe('the caller went away');
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(asked).toBe(0);
    } finally {
      agent.closeAllConnections();
      await new Promise((r) => agent.close(r));
    }
  });
});
