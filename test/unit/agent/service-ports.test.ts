// Packet counters per Service port across index changes: a kernel counter whose IP:port or NodePort another Service
// takes over counts for it only from then on, and the port it left keeps what it counted.
import { describe, expect, it } from 'vitest';
import { ServicePortSeries } from '../../../src/agent/metrics/service-ports.js';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { emptyObjects } from '../../../src/cluster/objects.js';
import { agentStateOf, loopReturn, toLb, vipOf } from '../../support/metrics-state.js';

/** A Service index of LB Services shop/s{i} on port 80, each with the given NodePort, and LB IP vipOf(i + shift). */
function indexOf(nodePorts: Record<number, number>, shift = 0): ServiceIndex {
  const objects = emptyObjects();
  for (const [i, nodePort] of Object.entries(nodePorts)) {
    objects.services.push({
      origin: 'test',
      object: {
        metadata: { name: `s${i}`, namespace: 'shop' },
        spec: { type: 'LoadBalancer', clusterIP: `172.16.0.${Number(i) + 1}`, ports: [{ port: 80, nodePort }] },
        status: { loadBalancer: { ingress: [{ ip: vipOf(Number(i) + shift) }] } },
      },
    });
  }
  return new ServiceIndex(buildClusterView(objects, { nodeName: 'n1' }), {
    nodeIps: ['192.0.2.1'],
    ipvsIps: [],
    podCidrs: ['10.244.1.0/24'],
  });
}

const loopReturnOf = (ports: ReturnType<ServicePortSeries['scrape']>['ports']) =>
  Object.fromEntries(ports.map((p) => [p.labels.service, p.lbPath.get('loop_return')?.packets]));

describe('Service port packet counters', () => {
  it('a NodePort another Service takes over counts for it only from then on; the one it left keeps its count', () => {
    const t = agentStateOf(indexOf({ 0: 30080, 1: 30081 }));
    const series = new ServicePortSeries({ maxServicePorts: 300, idleMs: 3_600_000, now: () => 0 });
    t.counter.samples = [loopReturn(30080, 500), toLb(1, 7)];
    expect(loopReturnOf(series.scrape(t.state).ports)).toEqual({ s0: 500, s1: 0 });
    // s0 deleted, its NodePort given to s1: no new packet counted.
    t.state.index = indexOf({ 1: 30080 });
    expect(loopReturnOf(series.scrape(t.state).ports)).toEqual({ s0: 500, s1: 0 });
    t.counter.samples = [loopReturn(30080, 520), toLb(1, 7)];
    expect(loopReturnOf(series.scrape(t.state).ports)).toEqual({ s0: 500, s1: 20 });
  });

  it('a counter opened again (counts going down) counts from zero, without taking back what it counted', () => {
    const t = agentStateOf(indexOf({ 0: 30080 }));
    const series = new ServicePortSeries({ maxServicePorts: 300, idleMs: 3_600_000, now: () => 0 });
    t.counter.samples = [loopReturn(30080, 500)];
    series.scrape(t.state);
    t.counter.samples = [loopReturn(30080, 3)];
    expect(loopReturnOf(series.scrape(t.state).ports)).toEqual({ s0: 503 });
  });

  it("a port whose LB IP changed is exported with today's view, while it keeps the old IP's count", () => {
    const t = agentStateOf(indexOf({ 0: 30080 }));
    const series = new ServicePortSeries({ maxServicePorts: 300, idleMs: 3_600_000, now: () => 0 });
    t.counter.samples = [toLb(0, 7)];
    series.scrape(t.state);
    // s0's LB IP is now vipOf(5) (a new DNS answer, or a re-created LB): the old IP's counter leaves it.
    t.state.index = indexOf({ 0: 30080 }, 5);
    const [s0] = series.scrape(t.state).ports;
    expect(s0!.view?.lbIngress.map((i) => i.ip)).toEqual([vipOf(5)]);
    expect(s0!.lbPath.get('to_lb')?.packets).toBe(7);
  });

  it('a port that idles while a counter still counts for it keeps its retired count: it never goes down', () => {
    let now = 0;
    const twoIps = (both: boolean) => {
      const index = indexOf({ 0: 30080 });
      const view = index.lb.view.services[0]!;
      if (both) view.lbIngress = [...view.lbIngress, { ...view.lbIngress[0]!, ip: vipOf(1) }];
      return new ServiceIndex(index.lb.view, { nodeIps: ['192.0.2.1'], ipvsIps: [], podCidrs: ['10.244.1.0/24'] });
    };
    const t = agentStateOf(twoIps(true));
    const series = new ServicePortSeries({ maxServicePorts: 300, idleMs: 60_000, now: () => now });
    const toLbOf = () => series.scrape(t.state).ports.map((p) => p.lbPath.get('to_lb')?.packets);
    t.counter.samples = [toLb(0, 100), toLb(1, 900)];
    expect(toLbOf()).toEqual([1000]);
    // The second LB IP goes: its 900 stay with the port; then the port idles past idleMs and gets traffic again.
    t.state.index = twoIps(false);
    now = 1000;
    expect(toLbOf()).toEqual([1000]);
    now = 120_000;
    expect(toLbOf()).toEqual([]);
    t.counter.samples = [toLb(0, 110)];
    now = 121_000;
    expect(toLbOf()).toEqual([1010]);
  });
});
