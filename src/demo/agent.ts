// The demo's agent: `clbprobe agent`'s Agent and /metrics server on node1's namespace, serving on a loopback port.
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { createAgentRegistry } from '../agent/metrics/list.js';
import { parseSamples, type Sample } from '../export/parse-samples.js';
import { createMetricsServer } from '../export/server.js';
import { LAB, type LoopLab } from './lab.js';

export type DemoAgent = Awaited<ReturnType<typeof startDemoAgent>>;

export async function startDemoAgent(lab: LoopLab, clusterFile: string) {
  // Loaded on demand: the agent pulls in the Kubernetes client, which the other demo steps do not need.
  const { Agent } = await import('../agent/agent.js');
  const logged: string[] = [];
  const agent = new Agent({
    nodeName: LAB.node1Name,
    version: 'demo',
    log: pino({ level: 'warn' }, { write: (line: string) => void logged.push(line) }),
    netns: lab.node.path,
    ifname: 'eth0',
    capture: 'auto',
    clusterFile,
    clusterApi: false,
    resyncIntervalS: 3600,
    conntrackResyncIntervalS: 3600,
  });
  const registry = createAgentRegistry(() => agent.metricsState(), { maxServicePorts: 100, processMetrics: false });
  const http = createMetricsServer({ registry, ready: () => agent.ready });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', () => resolve());
  });
  const metricsUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}/metrics`;
  try {
    await agent.start();
  } catch (e) {
    http.close();
    await agent.stop();
    throw e;
  }
  return {
    /** e.g. "eBPF (tcx) on eth0", or why the counters are off. */
    counting: agent.captureDescription,
    metricsUrl,
    /** The current /metrics samples of lab/web (and the agent-wide ones). */
    async scrape(): Promise<Sample[]> {
      const res = await fetch(metricsUrl);
      if (!res.ok) throw new Error(`${metricsUrl}: HTTP ${res.status}`);
      return parseSamples(await res.text());
    },
    /** The agent's warn-level log lines so far ("finding raised", ...), as JSON objects. */
    warnings: (): Record<string, unknown>[] => logged.map((l) => JSON.parse(l) as Record<string, unknown>),
    /** Re-reads NAT, addresses, conntrack and the cluster file now (the periodic resync, brought forward). */
    resync: () => agent.resync(),
    async stop() {
      http.closeAllConnections();
      http.close();
      await agent.stop();
    },
  };
}
