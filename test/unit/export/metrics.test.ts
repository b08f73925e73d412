// /metrics from a real agent state (test/support/metrics-state.ts): the golden exposition text
// (node_exporter style: the format is the interface), the series budget, and how per-Service
// series follow activity: appear with news, retire when idle, stay capped.
// Regenerate after an intended change: UPDATE_GOLDEN=1 npx vitest run test/unit/export/metrics.test.ts
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createAgentRegistry } from '../../../src/agent/metrics/list.js';
import { parseSamples } from '../../../src/export/parse-samples.js';
import { finding, loopReturn, nodePortOf, type TestAgent, testAgentState, toLb } from '../../support/metrics-state.js';

const GOLDEN = join(import.meta.dirname, 'metrics.golden.txt');
const HOUR = 3_600_000;

function registryOf(
  t: TestAgent,
  opts: { maxServicePorts?: number; processMetrics?: boolean; now?: () => number } = {},
) {
  return createAgentRegistry(() => t.state, { maxServicePorts: 500, processMetrics: false, ...opts });
}

const samples = async (t: TestAgent, reg = registryOf(t)) => parseSamples(await reg.metrics());
const servicesIn = (s: ReturnType<typeof parseSamples>) =>
  new Set(s.filter((x) => x.labels.service).map((x) => x.labels.service));

describe('/metrics of the agent', () => {
  it('matches the golden exposition text', async () => {
    const t = testAgentState(3);
    t.counter.samples = [toLb(0, 12), loopReturn(nodePortOf(0), 4), toLb(1, 0)];
    t.state.findings = [finding(0, 'L4-loop', 'active')];
    t.state.sources.health.down('ipvs', 'reading IPVS: EPERM');
    Object.assign(t.state.sources.durations, { cluster: 0.125, addresses: 0.0042, nat: 0.5, conntrack: 1.5 });
    const text = await registryOf(t).metrics();
    if (process.env.UPDATE_GOLDEN) writeFileSync(GOLDEN, text);
    expect(text).toBe(readFileSync(GOLDEN, 'utf8'));
  });

  it('an idle node sends the same few samples at 1,000 and at 5,000 LB Services, process metrics included', async () => {
    const counts: number[] = [];
    for (const n of [1000, 5000]) {
      const t = testAgentState(n);
      const s = await samples(t, registryOf(t, { processMetrics: true }));
      expect(servicesIn(s).size).toBe(0);
      expect(s.find((x) => x.name === 'clbprobe_service_ports_followed')?.value).toBe(n);
      counts.push(s.filter((x) => x.name.startsWith('clbprobe_')).length);
      expect(s.length).toBeLessThanOrEqual(300);
    }
    expect(counts[0]).toBe(counts[1]);
  });

  it('adds a few series per active Service port, not per Service', async () => {
    const t = testAgentState(5000);
    const reg = registryOf(t);
    const idle = (await samples(t, reg)).length;
    t.counter.samples = Array.from({ length: 20 }, (_, i) => toLb(i * 7, 5));
    const active20 = (await samples(t, reg)).length;
    t.counter.samples = Array.from({ length: 40 }, (_, i) => toLb(i * 7, 5));
    const active40 = (await samples(t, reg)).length;
    const perPort = (active20 - idle) / 20;
    expect(perPort).toBe(5); // packets and bytes of to_lb and loop_return, and its LB IP's binding
    expect(active40 - idle).toBe(40 * perPort);
  });

  it('shows to_lb and loop_return of a port with traffic, loop_return from 0, and no other Service', async () => {
    const t = testAgentState(10);
    const reg = registryOf(t);
    t.counter.samples = [toLb(3, 2)];
    const s = await samples(t, reg);
    expect([...servicesIn(s)]).toEqual(['s3']);
    const lb = (kind: string) =>
      s.find((x) => x.name === 'clbprobe_lb_path_packets_total' && x.labels.kind === kind)?.value;
    expect([lb('to_lb'), lb('loop_return'), lb('hc_local_src')]).toEqual([2, 0, undefined]);
  });

  it('retires a port after the idle timeout, brings it back with news, and keeps one with a finding', async () => {
    const t = testAgentState(10);
    let now = 0;
    const reg = registryOf(t, { now: () => now });
    t.counter.samples = [toLb(1, 5), toLb(2, 5)];
    expect(servicesIn(await samples(t, reg))).toEqual(new Set(['s1', 's2']));
    now = HOUR - 1;
    expect(servicesIn(await samples(t, reg))).toEqual(new Set(['s1', 's2']));
    t.state.findings = [finding(2, 'L4-loop', 'risk')];
    now = HOUR + 1;
    expect(servicesIn(await samples(t, reg))).toEqual(new Set(['s2']));
    t.counter.samples = [toLb(1, 6), toLb(2, 5)];
    const back = await samples(t, reg);
    expect(servicesIn(back)).toEqual(new Set(['s1', 's2']));
    expect(
      back.find(
        (x) => x.labels.service === 's1' && x.labels.kind === 'to_lb' && x.name === 'clbprobe_lb_path_packets_total',
      )?.value,
    ).toBe(6);
  });

  it('caps the ports with series, findings first, and counts the ports left out', async () => {
    const t = testAgentState(10);
    t.counter.samples = [toLb(0, 1), toLb(1, 1), toLb(2, 1)];
    t.state.findings = [finding(5, 'no-SNAT', 'risk')];
    const s = await samples(t, registryOf(t, { maxServicePorts: 2 }));
    expect(servicesIn(s)).toEqual(new Set(['s5', 's0']));
    expect(s.find((x) => x.name === 'clbprobe_series_dropped_total')?.value).toBe(2);
    expect(s.find((x) => x.name === 'clbprobe_service_ports_active')?.value).toBe(4);
  });

  it('keeps the last packet counts when a read fails, and tells the capture health why', async () => {
    const t = testAgentState(2);
    const reg = registryOf(t);
    const toLbOf = async () =>
      (await samples(t, reg)).find((x) => x.name === 'clbprobe_lb_path_packets_total' && x.labels.kind === 'to_lb')
        ?.value;
    t.counter.samples = [toLb(0, 5)];
    expect(await toLbOf()).toBe(5);
    t.counter.stoppedReason = 'eBPF counters on eth0 stopped';
    expect(await toLbOf()).toBe(5);
    t.counter.failure = new Error('EIO');
    expect(await toLbOf()).toBe(5); // not 0: that would read as a counter reset
    t.counter.failure = undefined;
    t.counter.stoppedReason = undefined;
    t.counter.samples = [toLb(0, 9)];
    expect(await toLbOf()).toBe(9);
    expect(t.told).toEqual([undefined, 'eBPF counters on eth0 stopped', 'reading counters: EIO', undefined]);
  });

  it('has no packet series without counters, and no binding series without the addresses source', async () => {
    const t = testAgentState(2, { capture: false });
    t.state.findings = [finding(0, 'L4-loop', 'active')];
    const s = await samples(t);
    expect(s.filter((x) => x.name.startsWith('clbprobe_lb_path_'))).toEqual([]);
    expect(s.find((x) => x.name === 'clbprobe_lb_ip_bound')?.labels.ip).toBe('10.1.0.1');
    const without = await samples(testAgentState(2, { capture: false, sources: ['cluster'] }));
    expect(without.filter((x) => x.name.startsWith('clbprobe_lb_ip'))).toEqual([]);
  });

  it('names every family as Prometheus asks: counters end in _total, durations in _seconds', async () => {
    const t = testAgentState(1);
    const text = await registryOf(t, { processMetrics: true }).metrics();
    for (const [, name, type] of text.matchAll(/^# TYPE (clbprobe_\S+) (\S+)$/gm)) {
      expect(name!.endsWith('_total'), name).toBe(type === 'counter');
      expect(name, 'base units').not.toMatch(/_(ms|milliseconds|kb|mb)\b/);
    }
  });
});
