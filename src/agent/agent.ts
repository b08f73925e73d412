// The long-running node agent: wires the readers, the cluster view, the
// conntrack event stream, the counters and the detectors into one state that
// the exporter renders and the evidence socket answers from. Event-driven,
// with a periodic full resync; a failing source degrades, never stops it.
import { readFileSync } from 'node:fs';
import { hostname, release } from 'node:os';
import { openCounter, type Counter } from '../capture/counter.js';
import type { ClusterWatch } from '../cluster/watch.js';
import { reloadClusterFile } from '../cluster/file.js';
import type { LookupOptions } from '../cluster/dns/lookup.js';
import { lbHostnamesOf, withLbHostnames } from '../cluster/lb-hostnames.js';
import type { ClusterView, ServiceView } from '../cluster/types.js';
import { changedServices, compareFindings, Diagnosis, prepareDiagnosis, type PreparedDiagnosis } from '../detect/index.js';
import type { Observations } from '../detect/correlator.js';
import { portKey } from '../model/service.js';
import { diagnoseInputOf } from '../detect/input.js';
import { localAddresses } from '../detect/local.js';
import type { Finding } from '../detect/types.js';
import { emptyState, type ExportState, type LbPathKind, type SvcPortLabels } from '../export/state.js';
import { dumpConntrack } from '../kernel/conntrack/dump.js';
import { ConntrackWatch } from '../kernel/conntrack/events.js';
import { ConntrackPrefilter } from '../kernel/conntrack/prefilter.js';
import type { AddressSnapshot, IpvsSnapshot, NodeSnapshot } from '../kernel/types.js';
import type { Logger } from '../log.js';
import { FLOW_OUTCOMES } from '../model/flow.js';
import { ConntrackTable } from './conntrack-table.js';
import { errText, type SourceDef, type SourceReader } from '../source/contract.js';
import type { SourceHealth } from '../source/health.js';
import { lookupsByName, type DnsSnapshot } from '../source/dns.js';
import { liveReaders } from '../source/list.js';
import { SourceRunner } from '../source/runner.js';
import { ServiceIndex, labelsOf } from './service-index.js';

export interface AgentOptions {
  nodeName: string;
  version: string;
  log: Logger;
  /** Read the datapath of this network namespace (path) instead of ours. */
  netns?: string;
  /** The uplink for the counters; default: the default-route interface. */
  ifname?: string;
  capture: 'ebpf' | 'pcap' | 'off' | 'auto';
  clusterFile?: string;
  kubeconfig?: string;
  /** Use the API (in-cluster or --kubeconfig) when there is no cluster file. */
  clusterApi: boolean;
  resyncIntervalS: number;
  /**
   * Full conntrack re-dump. Events (and a dump after any ENOBUFS overflow) keep the table exact;
   * this only catches what the kernel never reported. It costs about 1 s of CPU per 300k entries,
   * hence its own, longer interval.
   */
  conntrackResyncIntervalS: number;
  /**
   * Drop conntrack events that touch no LB Service in the kernel (an eBPF socket filter on the
   * event socket) instead of after receiving them: at 10k events/s towards no VIP, 5-7 % of a
   * core became 0.1 % (bench/agent). Falls back to user space when the program cannot load.
   * Default true.
   */
  conntrackKernelFilter?: boolean;
  /** Bounds and resolv.conf of the hostname-only LB lookups (cluster/dns/lookup.ts). */
  dnsLookup?: LookupOptions;
}

const KINDS: LbPathKind[] = ['to_lb', 'loop_return', 'hc_local_src'];
/** Conntrack events trigger a diagnosis at most this often: one costs ~50 ms at 5,000 Services (bench/agent.ts). */
const DIAGNOSE_DELAY_MS = 1000;

/** The interface of the IPv4 default route in our namespace, from /proc/net/route. */
export function defaultRouteInterface(): string | undefined {
  const lines = readFileSync('/proc/net/route', 'utf8').split('\n').slice(1);
  return lines.map((l) => l.trim().split(/\s+/)).find((f) => f[1] === '00000000' && f[7] === '00000000')?.[0];
}

/** A kernel notification asks for a re-read of its source at most this often. */
const WATCH_DELAY_MS = 100;

export class Agent {
  /** Every polled source's reads, health, durations, resyncs and errors (src/source). */
  private readonly runner: SourceRunner;
  /** The live readers of src/source/list.ts the agent polls (conntrack it follows by events, below). */
  private readonly readers: { def: SourceDef<unknown>; reader: SourceReader }[];
  private stopWatches: (() => void)[] = [];
  private readTimers = new Map<string, NodeJS.Timeout>();
  private cluster: ClusterView = { fresh: false, staleReason: 'not read yet', services: [], warnings: [] };
  /** `cluster` with the hostname-only LBs' resolved addresses (the dns source): what the index and the diagnosis read. */
  private view: ClusterView = this.cluster;
  private clusterFileDigest?: string;
  private index: ServiceIndex;
  /** Skips conntrack messages that touch no LB Service before decoding them (most of a busy table). */
  private prefilter: ConntrackPrefilter;
  readonly table: ConntrackTable;
  private counter?: Counter;
  private watch?: ConntrackWatch;
  private clusterWatch?: ClusterWatch;
  private findings: Finding[] = [];
  private findingsCache?: { of: Finding[]; items: ExportState['findings']; labels: Map<string, SvcPortLabels> };
  private tableCache?: Pick<ExportState, 'flows' | 'conntrackEntries'> & { changes: number };
  /** The snapshot-and-cluster half of the diagnosis, reused while only conntrack changes; undefined = stale. */
  private prepared?: PreparedDiagnosis;
  /** The observations behind `findings`, to re-diagnose only the Service ports whose observations changed. */
  private lastObs?: Observations;
  // exportState's reusable parts (see lbPathState, configState).
  /** The LB-path slots: KINDS.length per Service port, in KINDS order, from the Service port's `first`. */
  private lbSlots?: { index: ServiceIndex; first: Map<ServiceView, number>; all: ExportState['lbPath'] };
  private configCache?: Pick<ExportState, 'lbIpBound' | 'ipvsRealServers'> & { index: ServiceIndex; addresses?: AddressSnapshot; ipvs?: IpvsSnapshot };
  private timers: NodeJS.Timeout[] = [];
  private diagnoseTimer?: NodeJS.Timeout;
  private firstSync = false;
  readonly ifname?: string;

  constructor(private readonly o: AgentOptions) {
    this.runner = new SourceRunner(o.log);
    // natFactsOnly: the agent diagnoses from the NAT facts alone; it never keeps the parsed rules (issue 16).
    this.readers = liveReaders(
      {
        ...(o.netns ? { netns: o.netns } : {}),
        natFactsOnly: true,
        lbHostnames: () => lbHostnamesOf(this.cluster),
        ...(o.dnsLookup ? { dnsLookup: o.dnsLookup } : {}),
      },
      (d) => !d.streamedByAgent,
    );
    this.index = new ServiceIndex(this.cluster, localAddresses(undefined, undefined));
    this.table = new ConntrackTable(this.index);
    this.prefilter = new ConntrackPrefilter(this.index.prefilterTargets());
    this.ifname = o.ifname ?? (o.netns ? undefined : defaultRouteInterface());
  }

  /** What counts the LB-path packets, e.g. "eBPF (tcx) on eth0", or why nothing does. */
  get captureDescription(): string {
    if (this.counter) return this.counter.description;
    return `off (${this.o.capture === 'off' ? '--capture off' : (this.health.reasonOf('capture') ?? 'not started')})`;
  }

  get ready(): boolean {
    return this.firstSync;
  }

  get health(): SourceHealth {
    return this.runner.health;
  }

  private get addresses(): AddressSnapshot | undefined {
    return this.runner.value<AddressSnapshot>('addresses');
  }

  private get ipvs(): IpvsSnapshot | undefined {
    return this.runner.value<IpvsSnapshot>('ipvs');
  }

  private get ns(): { netns?: string } {
    return this.o.netns ? { netns: this.o.netns } : {};
  }

  async start(): Promise<void> {
    await this.startCluster();
    // The sources the Service index is built from come first: the counters' targets and the
    // conntrack prefilter start from that index.
    await this.readSources(this.readers.filter((x) => x.def.indexes));
    for (const x of this.readers) {
      const stop = x.reader.watch?.({
        changed: () => this.scheduleRead(x),
        failed: (reason) => this.health.down(x.def.name, reason),
      });
      if (stop) this.stopWatches.push(stop);
    }
    this.startCapture();
    await this.readSources(this.readers.filter((x) => !x.def.indexes));
    await this.startConntrack();
    this.firstSync = true;
    this.o.log.info({ services: this.index.services.length, kept: this.table.size }, 'first sync done');
    this.diagnose();
    const t = setInterval(() => void this.resync(), this.o.resyncIntervalS * 1000);
    const c = setInterval(() => void this.dumpConntrack().then(() => this.diagnose()), this.o.conntrackResyncIntervalS * 1000);
    for (const x of [t, c]) {
      x.unref();
      this.timers.push(x);
    }
  }

  /** Detaches the programs and closes every socket; idempotent. */
  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    clearTimeout(this.diagnoseTimer);
    for (const t of this.readTimers.values()) clearTimeout(t);
    for (const stop of this.stopWatches) stop();
    this.watch?.stop();
    this.counter?.close();
    await this.clusterWatch?.stop();
  }

  /** Full re-read of every polled source; with `conntrack`, of the conntrack table too. */
  async resync(opts: { conntrack?: boolean } = {}): Promise<void> {
    if (this.o.clusterFile) this.loadClusterFile();
    await Promise.all([this.readSources(this.readers), ...(opts.conntrack ? [this.dumpConntrack()] : [])]);
    this.diagnose();
  }

  private async startCluster(): Promise<void> {
    if (this.o.clusterFile) return this.loadClusterFile();
    if (!this.o.clusterApi) {
      this.health.down('cluster', 'no cluster source: pass --cluster-file or --kubeconfig (or run in a pod)');
      return;
    }
    try {
      // Loaded only for the API. (The API client is our own, cluster/kube-config.ts: @kubernetes/client-node
      // would cost ~70 MB of RSS; it loads only for kubeconfigs with exec plugins or auth-providers.)
      const { ClusterWatch } = await import('../cluster/watch.js');
      this.clusterWatch = new ClusterWatch({
        nodeName: this.o.nodeName,
        ...(this.o.kubeconfig ? { kubeconfig: this.o.kubeconfig } : {}),
        log: this.o.log,
        onChange: (v) => this.setCluster(v),
      });
      this.clusterWatch.start();
      // Wait a little for the first list; the agent starts degraded if the API is slow or away.
      const first = await Promise.race([this.clusterWatch.synced(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 10_000).unref())]);
      if (first) this.setCluster(first);
      else this.health.down('cluster', `Kubernetes API: first list not complete after 10 s: ${this.clusterWatch.status().reason ?? 'no reason known'}`);
    } catch (e) {
      this.health.down('cluster', errText(e));
    }
  }

  private loadClusterFile(): void {
    try {
      // Re-built only when the file changed: besides the parse, the indexes built from a new view
      // cost CPU and, while the old ones are still alive, tens of MB.
      const r = reloadClusterFile(this.o.clusterFile!, this.clusterFileDigest, { nodeName: this.o.nodeName });
      if (r.view) this.setCluster(r.view);
      this.clusterFileDigest = r.digest;
      this.health.resynced('cluster');
    } catch (e) {
      this.health.down('cluster', errText(e));
    }
  }

  private setCluster(v: ClusterView): void {
    const before = this.cluster.services.length;
    this.cluster = v;
    if (v.fresh) this.health.up('cluster');
    else this.health.down('cluster', v.staleReason ?? 'stale', false);
    if (v.services.length !== before) this.o.log.info({ servicePorts: v.services.length }, 'cluster view changed');
    this.rebuildIndex();
    // New LB names are looked up at once (before the first sync, start() reads them itself).
    if (this.firstSync) for (const x of this.readers) if (x.def.followsCluster) this.scheduleRead(x);
  }

  private scheduleRead(x: { def: SourceDef<unknown>; reader: SourceReader }): void {
    clearTimeout(this.readTimers.get(x.def.name));
    const t = setTimeout(() => {
      this.readTimers.delete(x.def.name);
      void this.readSources([x]).then(() => this.diagnose());
    }, WATCH_DELAY_MS);
    this.readTimers.set(x.def.name, t);
  }

  /**
   * Reads sources through the runner. A changed value or availability makes the prepared
   * diagnosis stale; a new value of a source the index is built from rebuilds the index. An
   * unchanged input (the same rules, no IPVS again for the same reason) keeps both, and with them
   * the rendered findings.
   */
  private async readSources(list: readonly { def: SourceDef<unknown>; reader: SourceReader }[]): Promise<void> {
    const outcomes = await this.runner.readAll(list.map((x) => x.reader));
    let reindex = false;
    outcomes.forEach((o, i) => {
      if (!o.changed) return;
      this.prepared = undefined;
      if (list[i]!.def.indexes && (o.result.state !== 'down' || o.result.value !== undefined)) reindex = true;
    });
    if (reindex) this.rebuildIndex();
  }

  private rebuildIndex(): void {
    this.prepared = undefined;
    this.view = withLbHostnames(this.cluster, lookupsByName(this.runner.value<DnsSnapshot>('dns')));
    this.index = new ServiceIndex(this.view, localAddresses(this.addresses, this.cluster.node));
    this.table.reindex(this.index);
    this.prefilter = new ConntrackPrefilter(this.index.prefilterTargets());
    if (this.watch) {
      const was = this.watch.stats.kernelFilter;
      this.watch.setPrefilter(this.prefilter);
      if (this.watch.stats.kernelFilter !== was) this.logKernelFilter();
    }
    if (this.counter) {
      try {
        this.counter.setTargets(this.index.targets());
      } catch (e) {
        this.health.down('capture', `updating targets: ${errText(e)}`);
      }
    }
    this.scheduleDiagnose();
  }

  private startCapture(): void {
    if (this.o.capture === 'off') return;
    if (!this.ifname) {
      this.health.down('capture', 'no uplink: pass --interface (no default route found)');
      return;
    }
    try {
      this.counter = openCounter({
        ifname: this.ifname,
        ...(this.o.netns ? { netnsPath: this.o.netns } : {}),
        backend: this.o.capture,
        logger: this.o.log,
      });
      this.counter.setTargets(this.index.targets());
      this.health.up('capture', this.counter.fallbackReason);
      this.o.log.info({ counter: this.counter.description }, 'counters running');
    } catch (e) {
      this.counter?.close();
      this.counter = undefined;
      this.health.down('capture', errText(e));
    }
  }

  private async startConntrack(): Promise<void> {
    let first!: () => void;
    let dumpStart = performance.now();
    const done = new Promise<void>((r) => (first = r));
    try {
      this.watch = new ConntrackWatch({
        ...this.ns,
        initialDump: true,
        prefilter: this.prefilter,
        kernelFilter: this.o.conntrackKernelFilter ?? true,
        onEvent: (ev) => {
          if (this.table.event(ev)) this.scheduleDiagnose();
        },
        resync: {
          begin: () => {
            dumpStart = performance.now();
            this.table.beginResync();
          },
          entries: (batch) => {
            const now = Date.now();
            for (const e of batch) this.table.upsert(e, now);
          },
          end: (info) => {
            this.table.endResync();
            this.runner.record('conntrack', { state: 'up', value: undefined }, performance.now() - dumpStart);
            if (info.interrupted) this.o.log.info(info, 'conntrack resync interrupted by table changes');
            this.scheduleDiagnose();
            first();
          },
        },
        onError: (e) => {
          this.health.down('conntrack', e.message);
          first();
        },
      });
    } catch (e) {
      this.health.down('conntrack', errText(e));
      return;
    }
    this.logKernelFilter();
    await done;
  }

  /** Where conntrack events that touch no LB Service are dropped, once at start and when it changes. */
  private logKernelFilter(): void {
    const state = this.watch!.stats.kernelFilter;
    if (state === 'on') this.o.log.info('conntrack events pre-filtered in the kernel (eBPF socket filter)');
    else if (state !== 'not requested') this.o.log.warn({ reason: state }, 'conntrack events filtered in user space only');
  }

  private async dumpConntrack(): Promise<void> {
    if (!this.watch) return;
    const t0 = performance.now();
    try {
      this.table.beginResync();
      const now = Date.now();
      await dumpConntrack((b) => b.forEach((e) => this.table.upsert(e, now)), { ...this.ns, prefilter: this.prefilter });
      this.table.endResync();
      // No key: the table, not a snapshot value, is what the diagnosis reads of conntrack.
      this.runner.record('conntrack', { state: 'up', value: undefined }, performance.now() - t0);
    } catch (e) {
      this.runner.record('conntrack', { state: 'down', reason: `dump: ${errText(e)}` }, performance.now() - t0);
    }
  }

  private scheduleDiagnose(): void {
    if (!this.firstSync || this.diagnoseTimer) return;
    this.diagnoseTimer = setTimeout(() => {
      this.diagnoseTimer = undefined;
      this.diagnose();
    }, DIAGNOSE_DELAY_MS);
  }

  /**
   * Runs the detectors over the current state (kept entries only: small); logs findings that
   * appear or clear. After a change of the snapshot or the cluster view every Service port is
   * diagnosed; when only conntrack changed, only the ports whose observations changed (a full
   * diagnosis costs ~50 ms at 5,000 Services, bench/agent.ts: too much once a second).
   */
  private diagnose(): void {
    try {
      // Observations of an earlier prepared input say nothing about what changed since.
      const before = this.prepared ? this.lastObs : undefined;
      if (!this.prepared) this.prepared = prepareDiagnosis(diagnoseInputOf(this.nodeSnapshot(), this.view));
      const d = new Diagnosis(this.prepared);
      if (this.health.has('conntrack')) d.conntrackSeen();
      for (const k of this.table.entries()) d.add(k.entry);
      const obs = d.observations();
      this.lastObs = obs;
      const significant = (f: Finding) => f.severity !== 'info';
      let next: Finding[];
      if (!before) next = d.finish().findings.filter(significant);
      else {
        const changed = changedServices(before, obs);
        if (changed.size === 0) return;
        const keys = new Set([...changed].map((s) => portKey(s, s.protocol, s.port)));
        const kept = this.findings.filter((f) => !keys.has(portKey(f.service, f.port.protocol, f.port.port)));
        next = [...kept, ...d.finish(changed).findings.filter(significant)].sort(compareFindings);
      }
      this.logChanges(next);
      this.findings = next;
    } catch (e) {
      this.o.log.error({ err: errText(e) }, 'diagnosis failed');
    }
  }

  private nodeSnapshot(): NodeSnapshot {
    return this.runner.snapshot({ takenAt: new Date().toISOString(), hostname: hostname(), kernel: release() });
  }

  private logChanges(next: Finding[]): void {
    const id = (f: Finding) => `${f.service.namespace}/${f.service.name}:${f.port.port}/${f.port.protocol} ${f.mechanism} ${f.severity}`;
    const before = new Set(this.findings.map(id));
    const after = new Set(next.map(id));
    for (const f of next) if (!before.has(id(f))) this.o.log.warn({ finding: id(f), summary: f.summary }, 'finding raised');
    for (const k of before) if (!after.has(k)) this.o.log.info({ finding: k }, 'finding cleared');
  }

  find(namespace: string, name: string, port?: number) {
    return this.index.find(namespace, name, port);
  }

  /** The exporter's view of the current state; reads the counters now, so /metrics is never older than the scrape. */
  exportState(): ExportState {
    const st = emptyState(this.o.nodeName, this.o.version);
    st.sources = this.health.list();
    Object.assign(st.resyncs, this.health.resyncs);
    Object.assign(st.errors, this.health.errors);
    Object.assign(st.sourceDurations, this.runner.durations);
    const idx = this.index;
    if (this.counter) st.lbPath = this.lbPathState(idx, this.counter);
    const table = this.tableState();
    st.flows = table.flows;
    st.findings = this.findingsState();
    st.conntrackEntries = table.conntrackEntries;
    const config = this.configState(idx);
    st.lbIpBound = config.lbIpBound;
    st.ipvsRealServers = config.ipvsRealServers;
    return st;
  }

  /**
   * The LB-path counters, one slot per Service port and kind, every one present at 0 so that "no
   * loop" is a value, not an absence. The slots live as long as the index: a scrape zeroes and
   * refills them instead of allocating 20k objects at 5,000 Services.
   */
  private lbPathState(idx: ServiceIndex, counter: Counter): ExportState['lbPath'] {
    if (this.lbSlots?.index !== idx) {
      const first = new Map<ServiceView, number>();
      const all: ExportState['lbPath'] = [];
      for (const s of idx.services) {
        const svc = labelsOf(s);
        first.set(s, all.length);
        for (const kind of KINDS) all.push({ svc, kind, packets: 0, bytes: 0 });
      }
      this.lbSlots = { index: idx, first, all: all.slice() };
    }
    const { first, all } = this.lbSlots;
    for (const x of all) x.packets = x.bytes = 0;
    try {
      for (const c of counter.read().counters) {
        const k = KINDS.indexOf(c.kind);
        if (k < 0) continue;
        for (const s of idx.ofSample(c)) {
          const at = first.get(s);
          if (at === undefined) continue;
          const x = all[at + k]!;
          x.packets += c.packets;
          x.bytes += c.bytes;
        }
      }
    } catch (e) {
      this.health.down('capture', `reading counters: ${errText(e)}`);
    }
    return all;
  }

  /**
   * The flow counters and the entries gauge, made again only when the conntrack table changed
   * (an event, a re-dump, a new index) since the last scrape: between events a scrape allocates
   * none of their ~10k items and per-Service maps, which at 5,000 Services was most of a scrape's
   * garbage.
   */
  private tableState(): Pick<ExportState, 'flows' | 'conntrackEntries'> {
    const t = this.table;
    if (this.tableCache?.changes === t.changes) return this.tableCache;
    const flows: ExportState['flows'] = [];
    for (const counts of t.outcomes.values()) {
      for (const outcome of FLOW_OUTCOMES) if (counts[outcome] > 0) flows.push({ svc: counts.svc, outcome, count: counts[outcome] });
    }
    const states = new Map<SvcPortLabels, Map<string, ExportState['conntrackEntries'][number]>>();
    for (const k of t.entries()) {
      if (!k.toVip) continue;
      const state = k.entry.tcpState ?? (k.entry.statusFlags.includes('SEEN_REPLY') ? 'REPLIED' : 'UNREPLIED');
      for (const s of k.svcs) {
        const svc = labelsOf(s);
        let byState = states.get(svc);
        if (!byState) states.set(svc, (byState = new Map()));
        const x = byState.get(state);
        if (x) x.count++;
        else byState.set(state, { svc, state, count: 1 });
      }
    }
    const conntrackEntries: ExportState['conntrackEntries'] = [];
    for (const byState of states.values()) conntrackEntries.push(...byState.values());
    this.tableCache = { changes: t.changes, flows, conntrackEntries };
    return this.tableCache;
  }

  /**
   * The findings gauge's items, made again only when a diagnosis replaced the findings. Made per
   * scrape, each carried a new labels object, so the exporter formatted its label text again at
   * every scrape (the cap caches texts by labels object): thousands per scrape at 5,000 Services.
   */
  private findingsState(): ExportState['findings'] {
    const cache = this.findingsCache;
    if (cache?.of === this.findings) return cache.items;
    // A Service port keeps its labels object from one diagnosis to the next, so the exporter's
    // cached label text stays valid (a new object per finding was formatted again).
    const labels = new Map<string, SvcPortLabels>();
    const items = this.findings.map((f) => {
      const id = portKey(f.service, f.port.protocol, f.port.port);
      let svc = labels.get(id) ?? cache?.labels.get(id);
      if (!svc) svc = { namespace: f.service.namespace, service: f.service.name, port: String(f.port.port), protocol: f.port.protocol };
      labels.set(id, svc);
      return { svc, mechanism: f.mechanism, severity: f.severity };
    });
    this.findingsCache = { of: this.findings, items, labels };
    return items;
  }

  /** The gauges that follow the index, the addresses and IPVS only: rebuilt when one of them changes. */
  private configState(idx: ServiceIndex): Pick<ExportState, 'lbIpBound' | 'ipvsRealServers'> {
    const c = this.configCache;
    if (c && c.index === idx && c.addresses === this.addresses && c.ipvs === this.ipvs) return c;
    const lbIpBound: ExportState['lbIpBound'] = [];
    const ipvsRealServers: ExportState['ipvsRealServers'] = [];
    // Virtual servers by address|protocol|port: a lookup per LB ingress, not a scan of them all per Service.
    const vsByKey = new Map<string, IpvsSnapshot['virtualServers']>();
    for (const v of this.ipvs?.virtualServers ?? []) {
      const k = `${v.address}|${v.protocol}|${v.port}`;
      const list = vsByKey.get(k);
      if (list) list.push(v);
      else vsByKey.set(k, [v]);
    }
    for (const s of idx.services) {
      const svc = labelsOf(s);
      if (this.addresses) for (const i of s.lbIngress) lbIpBound.push({ svc, ip: i.ip, bound: idx.isIpvsBound(i.ip) });
      if (!this.ipvs) continue;
      let local = 0;
      let remote = 0;
      for (const ip of new Set(s.lbIngress.map((i) => i.ip))) {
        for (const v of vsByKey.get(`${ip}|${s.protocol}|${s.port}`) ?? []) {
          for (const r of v.realServers) if (idx.isLocal(r.address)) local++;
          else remote++;
        }
      }
      ipvsRealServers.push({ svc, locality: 'local', count: local }, { svc, locality: 'remote', count: remote });
    }
    this.configCache = { index: idx, ...(this.addresses ? { addresses: this.addresses } : {}), ...(this.ipvs ? { ipvs: this.ipvs } : {}), lbIpBound, ipvsRealServers };
    return this.configCache;
  }
}

