// A real AgentState for /metrics tests: a cluster view of N LB Services built by the real
// builders, the real Service index, conntrack table and source runner. Only the packet counter is
// a stand-in, since its counts come from the kernel: it hands over the samples a test sets.

import { ConntrackTable } from '../../src/agent/conntrack-table.js';
import type { AgentState } from '../../src/agent/metrics/collector.js';
import { ServiceIndex } from '../../src/agent/service-index.js';
import type { Counter } from '../../src/capture/counter.js';
import type { CounterReading, CounterSample } from '../../src/capture/targets.js';
import { buildClusterView } from '../../src/cluster/build.js';
import { emptyObjects } from '../../src/cluster/objects.js';
import type { Finding } from '../../src/detect/types.js';
import type { ConntrackEntry } from '../../src/kernel/types.js';
import { SourceRunner } from '../../src/source/runner.js';

/** The LB VIP of Service shop/s{i}: 10.1.x.y, port 80. */
export const vipOf = (i: number): string => `10.1.${Math.floor(i / 250)}.${(i % 250) + 1}`;

export interface TestCounter extends Counter {
  samples: CounterSample[];
  /** Set to make the next reads throw. */
  failure?: Error;
  stoppedReason?: string;
}

export function testCounter(): TestCounter {
  const c: TestCounter = {
    backend: 'ebpf',
    description: 'test counter',
    samples: [],
    get stopped() {
      return c.stoppedReason;
    },
    setTargets: () => undefined,
    read(): CounterReading {
      if (c.failure) throw c.failure;
      return {
        backend: 'ebpf',
        counters: c.samples,
        seen: { ingress: 0, egress: 0 },
        drops: { counterMapFull: 0, captureBuffer: 0, interface: 0 },
      };
    },
    close: () => undefined,
  };
  return c;
}

/** A to_lb sample of `packets` towards Service i's VIP. */
export function toLb(i: number, packets: number): CounterSample {
  return { target: vipOf(i), port: 80, proto: 'tcp', kind: 'to_lb', direction: 'egress', packets, bytes: packets * 60 };
}

export function loopReturn(nodePort: number, packets: number): CounterSample {
  return {
    target: '0.0.0.0',
    port: nodePort,
    proto: 'tcp',
    kind: 'loop_return',
    direction: 'ingress',
    packets,
    bytes: packets * 60,
  };
}

/** NodePort of Service i: one each, outside the default range so that 20,000 Services fit. */
export const nodePortOf = (i: number): number => 20000 + i;

export function finding(i: number, mechanism: Finding['mechanism'], severity: Finding['severity']): Finding {
  return {
    service: { namespace: 'shop', name: `s${i}` },
    port: { port: 80, protocol: 'TCP', name: '' },
    mechanism,
    severity,
    summary: '',
    evidence: [],
    remedy: '',
  };
}

export interface TestAgent {
  state: AgentState;
  counter: TestCounter;
  told: (string | undefined)[];
}

/** An agent state with `services` LB Services shop/s0..s{n-1}, each of `sources` read once. */
export function testAgentState(services: number, opts: { capture?: boolean; sources?: string[] } = {}): TestAgent {
  const objects = emptyObjects();
  for (let i = 0; i < services; i++) {
    objects.services.push({
      origin: 'test',
      object: {
        metadata: { name: `s${i}`, namespace: 'shop' },
        spec: {
          type: 'LoadBalancer',
          clusterIP: `172.16.${Math.floor(i / 250)}.${(i % 250) + 1}`,
          ports: [{ port: 80, targetPort: 8080, nodePort: nodePortOf(i) }],
        },
        status: { loadBalancer: { ingress: [{ ip: vipOf(i) }] } },
      },
    });
  }
  const index = new ServiceIndex(buildClusterView(objects, { nodeName: 'n1' }), {
    nodeIps: ['192.0.2.1'],
    ipvsIps: [],
    podCidrs: ['10.244.1.0/24'],
  });
  return agentStateOf(index, opts);
}

/** An agent state over a Service index, each of `sources` read once. */
export function agentStateOf(index: ServiceIndex, opts: { capture?: boolean; sources?: string[] } = {}): TestAgent {
  const sources = new SourceRunner();
  for (const name of opts.sources ?? ['cluster', 'addresses', 'nat', 'conntrack'])
    sources.readSync({ name, read: () => ({ state: 'up', value: {} }) });
  const counter = testCounter();
  const told: (string | undefined)[] = [];
  const state: AgentState = {
    nodeName: 'n1',
    version: 'test',
    sources,
    index,
    counter: opts.capture === false ? undefined : counter,
    captureRead: (down) => told.push(down),
    table: new ConntrackTable(index),
    findings: [],
  };
  return { state, counter, told };
}

/** A conntrack entry from a pod of this node to Service i's VIP (real match, real table). */
export function vipEntry(i: number, id: number, established: boolean): ConntrackEntry {
  const sport = 30000 + (id % 30000);
  return {
    family: 4,
    proto: 'tcp',
    orig: { src: '10.244.1.5', sport, dst: vipOf(i), dport: 80, protoNum: 6 },
    reply: { src: vipOf(i), sport: 80, dst: '192.0.2.1', dport: sport, protoNum: 6 },
    tcpState: established ? 'ESTABLISHED' : 'SYN_SENT',
    status: established ? 2 : 0,
    statusFlags: established ? ['SEEN_REPLY'] : [],
    timeoutS: 100,
    mark: 0,
    zone: 0,
    id,
  };
}
