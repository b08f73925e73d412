// The capture source's health from what the counters say (src/agent/capture-health.ts), and the
// LB-path counters a scrape shows when the counters stop, fail a read, or count again.
import { describe, expect, it } from 'vitest';
import { CaptureHealth } from '../../../src/agent/capture-health.js';
import { lbPath } from '../../../src/agent/metrics/lb-path.js';
import type { AgentState } from '../../../src/agent/metrics/collector.js';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import type { Counter } from '../../../src/capture/counter.js';
import type { CounterReading } from '../../../src/capture/targets.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { emptyObjects } from '../../../src/cluster/objects.js';
import { SourceHealth } from '../../../src/source/health.js';

const GONE = 'eBPF counters on eth0 stopped: the interface was deleted (ifindex 2); packets are not counted since';
const state = (h: SourceHealth) => ({ up: h.list().find((s) => s.source === 'capture')?.up, reason: h.reasonOf('capture') });

describe('CaptureHealth', () => {
  it('goes down while the counters count nothing and up again, with its notes, when they count again', () => {
    const h = new SourceHealth();
    const c = new CaptureHealth(h);
    c.applied('eBPF unavailable: using pcap', undefined);
    c.read(undefined);
    expect(state(h)).toEqual({ up: true, reason: 'eBPF unavailable: using pcap' });
    c.read(GONE);
    c.read(GONE);
    expect(state(h)).toEqual({ up: false, reason: GONE });
    expect(h.errors.capture).toBe(2);
    c.applied(undefined, GONE); // a target change while stopped: still down
    expect(state(h)).toEqual({ up: false, reason: GONE });
    c.read(undefined); // re-attached
    expect(state(h)).toEqual({ up: true, reason: undefined });
  });

  it('leaves the source down when something else put it down since', () => {
    const h = new SourceHealth();
    const c = new CaptureHealth(h);
    c.applied(undefined, undefined);
    c.read('reading counters: EIO');
    h.down('capture', 'updating targets: ENOMEM');
    c.read(undefined);
    expect(state(h)).toEqual({ up: false, reason: 'updating targets: ENOMEM' });
  });
});

describe('lbPath at a scrape', () => {
  const objects = emptyObjects();
  objects.services.push({
    origin: 't',
    object: {
      metadata: { name: 'web', namespace: 'shop' },
      spec: { type: 'LoadBalancer', clusterIP: '172.16.0.1', ports: [{ port: 80, targetPort: 8080, nodePort: 30001 }] },
      status: { loadBalancer: { ingress: [{ ip: '10.0.0.10' }] } },
    },
  });
  const index = new ServiceIndex(buildClusterView(objects, { nodeName: 'n1' }), { nodeIps: ['10.0.1.1'], ipvsIps: [], podCidrs: [] });
  const reading = (packets: number): CounterReading => ({
    backend: 'ebpf',
    counters: [{ target: '10.0.0.10', port: 80, proto: 'tcp', kind: 'to_lb', direction: 'egress', packets, bytes: packets * 60 }],
    seen: { ingress: 0, egress: 0 },
    drops: { counterMapFull: 0, captureBuffer: 0, interface: 0 },
  });

  it('shows what was counted with the reason the counters stopped, and keeps the last values when a read fails', () => {
    let next: () => CounterReading = () => reading(5);
    let stopped: string | undefined;
    const counter = { read: () => next(), get stopped() { return stopped; } } as unknown as Counter;
    const told: (string | undefined)[] = [];
    const fill = lbPath.filler();
    const scrape = () => fill({ index, counter, captureRead: (d: string | undefined) => told.push(d) } as unknown as AgentState).lbPath;
    const toLb = () => scrape().find((x) => x.kind === 'to_lb')?.packets;
    expect(toLb()).toBe(5);
    stopped = GONE;
    expect(toLb()).toBe(5);
    next = () => {
      throw new Error('EIO');
    };
    expect(toLb()).toBe(5); // not 0: that would read as a counter reset
    stopped = undefined;
    next = () => reading(9);
    expect(toLb()).toBe(9);
    expect(told).toEqual([undefined, GONE, 'reading counters: EIO', undefined]);
  });
});
