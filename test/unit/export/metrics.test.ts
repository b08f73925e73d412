// /metrics rendered from a fixed state must equal the golden file byte for
// byte (node_exporter style: the exposition format is the interface).
// Regenerate after an intended change: UPDATE_GOLDEN=1 npx vitest run test/unit/export
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { constants as zlibConstants, gunzipSync, inflateRawSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { createRegistry, emptyState, type ExportState } from '../../../src/agent/metrics/list.js';
import type { BufferedRegistry } from '../../../src/export/metrics.js';
import type { SvcPortLabels } from '../../../src/export/state.js';

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
  s.sourceDurations = { addresses: 0.0042, nat: 0.125 };
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

  it('caps again when a list is replaced (lists handed over unchanged are not looked at twice)', async () => {
    const s = emptyState('node-1', '0.1.0');
    s.lbPath = [{ svc: api, kind: 'to_lb', packets: 1, bytes: 60 }];
    const reg = createRegistry(() => s, { maxServicePorts: 1, processMetrics: false });
    expect(await reg.metrics()).toContain('clbprobe_series_dropped_total 0');
    s.flows = [{ svc: web, outcome: 'replied', count: 1 }];
    const text = await reg.metrics();
    expect(text).toContain('clbprobe_series_dropped_total 1');
    expect(text).not.toMatch(/service="web"/);
  });

  it('over the cap, decides again when new lists hold other Service ports, even as many as before', async () => {
    const svc = (name: string): SvcPortLabels => ({ namespace: 'shop', service: name, port: '80', protocol: 'TCP' });
    const [b, c, d] = [svc('b'), svc('c'), svc('d')];
    const s = emptyState('node-1', '0.1.0');
    const lbPath = (...svcs: SvcPortLabels[]) => svcs.map((x) => ({ svc: x, kind: 'to_lb' as const, packets: 1, bytes: 60 }));
    s.lbPath = lbPath(c, d);
    const reg = createRegistry(() => s, { maxServicePorts: 1, processMetrics: false });
    let text = await reg.metrics();
    expect(text).toMatch(/service="c"/);
    expect(text).not.toMatch(/service="d"/);
    // New lists of the same Service ports (as under conntrack events): the same decision.
    s.lbPath = lbPath(c, d);
    s.flows = [{ svc: d, outcome: 'replied', count: 1 }];
    text = await reg.metrics();
    expect(text).toMatch(/service="c"/);
    expect(text).not.toMatch(/service="d"/);
    expect(text).toContain('clbprobe_series_dropped_total 1');
    // As many Service ports as before, one of them new and first by name: it takes the place.
    s.lbPath = lbPath(d, b);
    s.flows = [];
    text = await reg.metrics();
    expect(text).toMatch(/service="b"/);
    expect(text).not.toMatch(/service="[cd]"/);
    expect(text).toContain('clbprobe_series_dropped_total 1');
    // Then "a" comes and "b" is over: counted as dropped.
    s.lbPath = lbPath(d, b, svc('a'));
    text = await reg.metrics();
    expect(text).toMatch(/service="a"/);
    expect(text).not.toMatch(/service="[bcd]"/);
    expect(text).toContain('clbprobe_series_dropped_total 2');
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

  it('renders in reused chunks: each scrape equals a fresh render of the same state, whatever changed', async () => {
    // 5,000 Service ports (~20 chunks per family); every step changes something a real agent would.
    const svcs: SvcPortLabels[] = [];
    for (let i = 0; i < 5000; i++) svcs.push({ namespace: `ns-${i % 7}`, service: `svc-${i}`, port: '80', protocol: 'TCP' });
    const s = emptyState('node-1', '0.1.0');
    s.lbPath = svcs.flatMap((svc) => (['to_lb', 'loop_return', 'hc_local_src'] as const).map((kind) => ({ svc, kind, packets: 0, bytes: 0 })));
    s.lbIpBound = svcs.map((svc, i) => ({ svc, ip: `10.9.${i >> 8}.${i & 255}`, bound: false }));
    const reg = createRegistry(() => s, { maxServicePorts: 10_000, processMetrics: false });
    const fresh = () => createRegistry(() => s, { maxServicePorts: 10_000, processMetrics: false }).metrics();
    const steps: [string, () => void][] = [
      ['nothing', () => {}],
      ['one counter in the middle', () => (s.lbPath[7000]!.packets = 3)],
      ['the first and the last', () => ((s.lbPath[0]!.bytes = 60), (s.lbPath.at(-1)!.packets = 1))],
      ['a Service port added in the middle', () => s.lbPath.splice(300, 0, { svc: { ...svcs[0]!, service: 'new' }, kind: 'to_lb', packets: 5, bytes: 1 })],
      ['Service ports removed', () => s.lbPath.splice(10, 700)],
      ['a repeated label set (merged)', () => s.lbPath.push({ ...s.lbPath[20]!, svc: { ...s.lbPath[20]!.svc }, packets: 2 })],
      ['the repeat gone again', () => s.lbPath.pop()],
      ['a gauge flips', () => (s.lbIpBound[4000]!.bound = true)],
      ['everything gone', () => ((s.lbPath = []), (s.lbIpBound = []))],
    ];
    for (const [what, change] of steps) {
      change();
      const text = await reg.metrics();
      expect(text, what).toBe(await fresh());
      const body = await (reg as BufferedRegistry).metricsBody();
      expect(gunzipSync(Buffer.concat(body.gzipped)).toString(), what).toBe(text);
      expect(body.textLength, what).toBe(Buffer.byteLength(text));
      expect(body.gzippedLength, what).toBe(Buffer.concat(body.gzipped).length);
      if (what === 'nothing') expect(text).toContain('clbprobe_lb_path_packets_total{namespace="ns-0",service="svc-0",port="80",protocol="TCP",kind="to_lb"} 0\n');
      if (what.includes('merged')) expect(text).toContain(`service="${s.lbPath[20]!.svc.service}",port="80",protocol="TCP",kind="${s.lbPath[20]!.kind}"} ${s.lbPath[20]!.packets + 2}\n`);
    }
  });

  it('a changed counter re-compresses only its chunk', async () => {
    const s = emptyState('node-1', '0.1.0');
    for (let i = 0; i < 3000; i++) s.lbPath.push({ svc: { namespace: 'a', service: `s${i}`, port: '80', protocol: 'TCP' }, kind: 'to_lb', packets: 0, bytes: 0 });
    const reg = createRegistry(() => s, { maxServicePorts: 10_000, processMetrics: false }) as BufferedRegistry;
    const before = (await reg.metricsBody()).gzipped;
    s.lbPath[1500]!.packets = 1;
    const after = (await reg.metricsBody()).gzipped;
    expect(after.length).toBe(before.length);
    // The gzip trailer (CRC, size) is new at every scrape; of the kept segments, only one changed.
    const changed = after.slice(0, -1).filter((b, i) => b !== before[i]);
    // The packets family's chunk with sample 1500 (and nothing else): the bytes family is unchanged.
    expect(changed.length).toBe(1);
    const text = inflateRawSync(changed[0]!, { finishFlush: zlibConstants.Z_SYNC_FLUSH }).toString();
    expect(text).toContain('service="s1500",port="80",protocol="TCP",kind="to_lb"} 1\n');
  });
});
