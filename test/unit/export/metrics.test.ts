// /metrics rendered from a fixed state must equal the golden file byte for
// byte (node_exporter style: the exposition format is the interface).
// Regenerate after an intended change: UPDATE_GOLDEN=1 npx vitest run test/unit/export
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createRegistry } from '../../../src/export/metrics.js';
import { emptyState, type ExportState, type SvcPortLabels } from '../../../src/export/state.js';

const GOLDEN = join(import.meta.dirname, 'metrics.golden.txt');
const web: SvcPortLabels = { namespace: 'shop', service: 'web', port: '80', protocol: 'TCP' };
const api: SvcPortLabels = { namespace: 'shop', service: 'api', port: '443', protocol: 'TCP' };

function fixedState(): ExportState {
  const s = emptyState('node-1', '0.1.0');
  s.sources = [
    { source: 'conntrack', up: true },
    { source: 'ipvs', up: false },
  ];
  s.resyncs = { conntrack: 3, nat: 2 };
  s.errors = { ipvs: 2 };
  s.lbPath = [
    { svc: web, kind: 'to_lb', packets: 12, bytes: 720 },
    { svc: web, kind: 'loop_return', packets: 4, bytes: 240 },
    { svc: api, kind: 'loop_return', packets: 0, bytes: 0 },
  ];
  s.flows = [{ svc: web, outcome: 'loopback_pair', count: 2 }];
  s.findings = [{ svc: web, mechanism: 'L4-loop', severity: 'active' }];
  s.lbIpBound = [{ svc: web, ip: '10.0.100.100', bound: false }];
  s.ipvsRealServers = [
    { svc: web, locality: 'local', count: 1 },
    { svc: web, locality: 'remote', count: 2 },
  ];
  s.conntrackEntries = [{ svc: web, state: 'SYN_SENT', count: 1 }];
  return s;
}

describe('/metrics rendering', () => {
  it('matches the golden exposition text', async () => {
    const text = await createRegistry(fixedState, { maxServicePorts: 100, processMetrics: false }).metrics();
    if (process.env.UPDATE_GOLDEN) writeFileSync(GOLDEN, text);
    expect(text).toBe(readFileSync(GOLDEN, 'utf8'));
  });

  it('caps the Service ports with series and counts the dropped ones', async () => {
    const text = await createRegistry(fixedState, { maxServicePorts: 1, processMetrics: false }).metrics();
    // "shop/api" sorts first and is kept; "shop/web" is dropped from every per-Service metric.
    expect(text).toContain('clbprobe_lb_path_packets_total{namespace="shop",service="api"');
    expect(text).not.toMatch(/service="web"/);
    expect(text).toContain('clbprobe_series_dropped_total 1');
  });

  it('renders the current state at each scrape (counters follow the cumulative values)', async () => {
    const s = fixedState();
    const reg = createRegistry(() => s, { maxServicePorts: 100, processMetrics: false });
    expect(await reg.metrics()).toContain('kind="loop_return"} 4');
    s.lbPath[1]!.packets = 9;
    expect(await reg.metrics()).toContain('kind="loop_return"} 9');
    // A scrape with nothing changed gives the same text; a series that goes away leaves the next one.
    expect(await reg.metrics()).toBe(await reg.metrics());
    s.lbPath.splice(1, 1);
    expect(await reg.metrics()).not.toContain('service="web",port="80",protocol="TCP",kind="loop_return"');
  });

  it('escapes label values and merges repeated label sets as prom-client does (counters add up, gauges keep the last)', async () => {
    const s = emptyState('node-1', '0.1.0');
    const odd: SvcPortLabels = { namespace: 'a"b', service: 'c\\d', port: '80', protocol: 'TCP' };
    s.flows = [
      { svc: odd, outcome: 'replied', count: 2 },
      { svc: { ...odd }, outcome: 'replied', count: 3 },
    ];
    s.conntrackEntries = [
      { svc: odd, state: 'ESTABLISHED', count: 7 },
      { svc: odd, state: 'ESTABLISHED', count: 1 },
    ];
    const text = await createRegistry(() => s, { maxServicePorts: 100, processMetrics: false }).metrics();
    const svc = 'namespace="a\\"b",service="c\\\\d",port="80",protocol="TCP"';
    expect(text).toContain(`clbprobe_conntrack_flows_total{${svc},outcome="replied"} 5\n`);
    expect(text).toContain(`clbprobe_conntrack_entries{${svc},state="ESTABLISHED"} 1\n`);
  });

  it('appends prom-client process metrics after its own, and lists every family in the registry', async () => {
    const reg = createRegistry(fixedState, { maxServicePorts: 100, processMetrics: true });
    const text = await reg.metrics();
    expect(text.startsWith(readFileSync(GOLDEN, 'utf8'))).toBe(true);
    expect(text).toMatch(/\n\n# HELP process_cpu_seconds_total /);
    const names = reg.getMetricsAsArray().map((m) => m.name);
    expect(names).toContain('clbprobe_lb_path_packets_total');
    expect(names).toContain('process_resident_memory_bytes');
  });
});
