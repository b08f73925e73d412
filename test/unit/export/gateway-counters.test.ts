// A loop through a Gateway's LB is counted for the backend Service (issue 38): the Gateway's
// address joins the counters' targets at its listener's port, and packets towards it and back on
// the NodePort become the backend Service port's series. The cluster is the l7-gateway-loop
// fixture bundle's, built by the real builders and indexed by the agent's Service index.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createAgentRegistry } from '../../../src/agent/metrics/list.js';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments } from '../../../src/cluster/file.js';
import { parseSamples } from '../../../src/export/parse-samples.js';
import { agentStateOf } from '../../support/metrics-state.js';

const BUNDLE = join(import.meta.dirname, '../../fixtures/bundles/l7-gateway-loop');
const GATEWAY_VIP = '10.0.0.50';

describe('a loop through a Gateway, counted', () => {
  const { objects } = classifyDocuments([JSON.parse(readFileSync(join(BUNDLE, 'cluster.json'), 'utf8'))]);
  const view = buildClusterView(objects, { nodeName: 'node-a' });
  const index = new ServiceIndex(view, { nodeIps: ['10.0.1.11'], ipvsIps: [], podCidrs: ['10.244.1.0/24'] });

  it("puts the Gateway's address among the counters' targets at its listener's port", () => {
    expect(index.targets().vips).toContainEqual({ address: GATEWAY_VIP, port: 80, proto: 'tcp' });
  });

  it('counts packets to the Gateway and back on the NodePort as shop/web:80', async () => {
    const t = agentStateOf(index);
    t.counter.samples = [
      { target: GATEWAY_VIP, port: 80, proto: 'tcp', kind: 'to_lb', direction: 'egress', packets: 6, bytes: 360 },
      {
        target: '0.0.0.0',
        port: 30080,
        proto: 'tcp',
        kind: 'loop_return',
        direction: 'ingress',
        packets: 6,
        bytes: 360,
      },
    ];
    const s = parseSamples(
      await createAgentRegistry(() => t.state, { maxServicePorts: 300, processMetrics: false }).metrics(),
    );
    const packets = (kind: string) =>
      s.find(
        (x) =>
          x.name === 'clbprobe_lb_path_packets_total' &&
          x.labels.namespace === 'shop' &&
          x.labels.service === 'web' &&
          x.labels.port === '80' &&
          x.labels.kind === kind,
      )?.value;
    expect([packets('to_lb'), packets('loop_return')]).toEqual([6, 6]);
  });
});
