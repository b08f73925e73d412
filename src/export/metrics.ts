// The Prometheus metrics (prom-client), each rendered from ExportState at
// scrape time. Names follow Prometheus conventions: prefix clbprobe_,
// counters end in _total, per-Service series carry namespace/service/port/protocol.
import client from 'prom-client';
import type { ExportState, SvcPortLabels } from './state.js';

export interface MetricsOptions {
  /** At most this many Service ports get series; the rest are counted in clbprobe_series_dropped_total. */
  maxServicePorts: number;
  /** Adds prom-client's process metrics (process_cpu_seconds_total, ...); off for golden tests. */
  processMetrics: boolean;
}

const SVC = ['namespace', 'service', 'port', 'protocol'] as const;
const svcKey = (s: SvcPortLabels): string => `${s.namespace}/${s.service}:${s.port}/${s.protocol}`;

/** Which Service ports fit under the cap: the first N by name, so the set is stable between scrapes. */
class CardinalityCap {
  private readonly dropped = new Set<string>();
  private allowed = new Set<string>();
  constructor(private readonly max: number) {}

  update(state: ExportState): void {
    const keys = new Set<string>();
    const all = [state.lbPath, state.flows, state.findings, state.lbIpBound, state.ipvsRealServers, state.conntrackEntries];
    for (const list of all) for (const x of list) keys.add(svcKey(x.svc));
    const sorted = [...keys].sort();
    this.allowed = new Set(sorted.slice(0, this.max));
    for (const k of sorted.slice(this.max)) this.dropped.add(k);
  }
  admits(s: SvcPortLabels): boolean {
    return this.allowed.has(svcKey(s));
  }
  get droppedCount(): number {
    return this.dropped.size;
  }
}

export function createRegistry(getState: () => ExportState, opts: MetricsOptions): client.Registry {
  const registry = new client.Registry();
  const cap = new CardinalityCap(opts.maxServicePorts);
  let state: ExportState;
  /** Every metric renders from one state read per scrape; build_info's collect (first registered) takes it. */
  const svc = (s: SvcPortLabels) => ({ namespace: s.namespace, service: s.service, port: s.port, protocol: s.protocol });
  const reg = { registers: [registry] };

  new client.Gauge({
    name: 'clbprobe_build_info',
    help: 'Always 1; the labels say which clbprobe runs on which node.',
    labelNames: ['version', 'node'],
    ...reg,
    collect() {
      state = getState();
      cap.update(state);
      this.reset();
      this.set({ version: state.version, node: state.nodeName }, 1);
    },
  });
  new client.Gauge({
    name: 'clbprobe_source_up',
    help: 'Whether a datapath or cluster source was read successfully (1) or is failing (0).',
    labelNames: ['source'],
    ...reg,
    collect() {
      this.reset();
      for (const s of state.sources) this.set({ source: s.source }, s.up ? 1 : 0);
    },
  });
  new client.Counter({
    name: 'clbprobe_resyncs_total',
    help: 'Full re-reads of a source (periodic, or after lost events).',
    labelNames: ['source'],
    ...reg,
    collect() {
      this.reset();
      for (const [source, n] of Object.entries(state.resyncs)) this.inc({ source }, n);
    },
  });
  new client.Counter({
    name: 'clbprobe_errors_total',
    help: 'Failed reads or updates, by source.',
    labelNames: ['source'],
    ...reg,
    collect() {
      this.reset();
      for (const [source, n] of Object.entries(state.errors)) this.inc({ source }, n);
    },
  });
  for (const unit of ['packets', 'bytes'] as const) {
    new client.Counter({
      name: `clbprobe_lb_path_${unit}_total`,
      help:
        unit === 'packets'
          ? 'Packets on the LB path by kind: to_lb (local source to an LB VIP), loop_return (local source back in from the uplink), hc_local_src (LB health checks with a node-bound source).'
          : 'Bytes on the LB path by kind (see clbprobe_lb_path_packets_total).',
      labelNames: [...SVC, 'kind'],
      ...reg,
      collect() {
        this.reset();
        for (const x of state.lbPath) if (cap.admits(x.svc)) this.inc({ ...svc(x.svc), kind: x.kind }, x[unit]);
      },
    });
  }
  new client.Counter({
    name: 'clbprobe_conntrack_flows_total',
    help: 'Conntrack flows towards LB VIPs that ended, by outcome (replied, unreplied, loopback_pair, not_snated).',
    labelNames: [...SVC, 'outcome'],
    ...reg,
    collect() {
      this.reset();
      for (const x of state.flows) if (cap.admits(x.svc)) this.inc({ ...svc(x.svc), outcome: x.outcome }, x.count);
    },
  });
  new client.Gauge({
    name: 'clbprobe_findings_active',
    help: 'Findings currently reported for a Service port (1 while present), by mechanism and severity.',
    labelNames: [...SVC, 'mechanism', 'severity'],
    ...reg,
    collect() {
      this.reset();
      for (const x of state.findings) {
        if (cap.admits(x.svc)) this.set({ ...svc(x.svc), mechanism: x.mechanism, severity: x.severity }, 1);
      }
    },
  });
  new client.Gauge({
    name: 'clbprobe_lb_ip_bound',
    help: 'Whether the LB ingress IP of a Service port is bound on kube-ipvs0 on this node.',
    labelNames: [...SVC, 'ip'],
    ...reg,
    collect() {
      this.reset();
      for (const x of state.lbIpBound) if (cap.admits(x.svc)) this.set({ ...svc(x.svc), ip: x.ip }, x.bound ? 1 : 0);
    },
  });
  new client.Gauge({
    name: 'clbprobe_ipvs_real_servers',
    help: 'IPVS real servers behind the LB VIP:port of a Service port, local (on this node) or remote.',
    labelNames: [...SVC, 'locality'],
    ...reg,
    collect() {
      this.reset();
      for (const x of state.ipvsRealServers) if (cap.admits(x.svc)) this.set({ ...svc(x.svc), locality: x.locality }, x.count);
    },
  });
  new client.Gauge({
    name: 'clbprobe_conntrack_entries',
    help: 'Conntrack entries towards the LB VIPs of a Service port, by state.',
    labelNames: [...SVC, 'state'],
    ...reg,
    collect() {
      this.reset();
      for (const x of state.conntrackEntries) if (cap.admits(x.svc)) this.set({ ...svc(x.svc), state: x.state }, x.count);
    },
  });
  new client.Counter({
    name: 'clbprobe_series_dropped_total',
    help: 'Service ports left without series because of the cardinality cap (--max-service-ports).',
    ...reg,
    collect() {
      this.reset();
      this.inc(cap.droppedCount);
    },
  });
  if (opts.processMetrics) client.collectDefaultMetrics({ register: registry });
  return registry;
}
