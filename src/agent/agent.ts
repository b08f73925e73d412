// The long-running node agent: it only wires the sources, the conntrack table, the counters, the incremental
// diagnosis and the export state; event-driven with a periodic full resync, a failing source degrades, never stops it.
import { readFileSync } from 'node:fs';
import { hostname, release } from 'node:os';
import { type Counter, type CounterOptions, openCounter } from '../capture/counter.js';
import { type CaptureMode, packetTargets, type Targets, withinVipCapacity } from '../capture/targets.js';
import type { LookupOptions } from '../cluster/dns/lookup.js';
import { type PreparedDiagnosis, prepareDiagnosis } from '../detect/index.js';
import { diagnoseInputOf } from '../detect/input.js';
import { errText } from '../errors.js';
import { ConntrackPrefilter } from '../kernel/conntrack/prefilter.js';
import type { AddressPort } from '../model/ours.js';
import type { SourceHealth } from '../source/health.js';
import { CaptureHealth } from './capture-health.js';
import { type ConntrackFeed, LiveConntrack } from './conntrack-feed.js';
import { ConntrackTable } from './conntrack-table.js';
import { DiagnoseSchedule } from './diagnose-schedule.js';
import { IncrementalDiagnosis } from './diagnosis.js';
import type { AgentState } from './metrics/collector.js';
import type { ServiceIndex } from './service-index.js';
import { AgentSources, type PolledSource, type SourcesOptions } from './sources.js';
import { NewVipReads } from './vip-coverage.js';

export interface AgentOptions
  extends Pick<SourcesOptions, 'nodeName' | 'log' | 'clusterFile' | 'kubeconfig' | 'clusterApi'> {
  version: string;
  /** Read the datapath of this network namespace (path) instead of ours. */
  netns?: string;
  /** The uplink for the counters; default: the default-route interface. */
  ifname?: string;
  capture: CaptureMode;
  /** eBPF only: how the counters attach to the uplink (TCX, legacy tc cls_bpf, or TCX where the kernel has it). */
  tcAttach?: CounterOptions['attach'];
  resyncIntervalS: number;
  /** Full conntrack re-dump for what events never reported; costly per entry, hence its own longer interval. */
  conntrackResyncIntervalS: number;
  /** Drops non-LB conntrack events in the kernel (eBPF socket filter; user space if it cannot load); default true. */
  conntrackKernelFilter?: boolean;
  /** Bounds and resolv.conf of the hostname-only LB lookups (cluster/dns/lookup.ts). */
  dnsLookup?: LookupOptions;
  /** A bundle's files as inputs (bundle-inputs.ts): readers to poll instead of the live ones, and conntrack. */
  inputs?: { readers: (lbHostnames: () => readonly string[]) => PolledSource[]; conntrack: ConntrackFeed };
  /** Called at the end of reading all but conntrack (before the index build) and of the first sync (the dump). */
  onStartupPhase?: (phase: 'sources read' | 'first sync') => void;
}

/** What the agent opens its counters with: `backend` on `ifname`, the rest from its options. */
export function counterOptions(o: AgentOptions, backend: Exclude<CaptureMode, 'off'>, ifname: string): CounterOptions {
  return {
    ifname,
    ...(o.netns ? { netnsPath: o.netns } : {}),
    backend,
    ...(o.tcAttach ? { attach: o.tcAttach } : {}),
    logger: o.log,
  };
}

/** The interface of the IPv4 default route in our namespace, from /proc/net/route. */
export function defaultRouteInterface(): string | undefined {
  const lines = readFileSync('/proc/net/route', 'utf8').split('\n').slice(1);
  return lines.map((l) => l.trim().split(/\s+/)).find((f) => f[1] === '00000000' && f[7] === '00000000')?.[0];
}

export class Agent {
  private readonly sources: AgentSources;
  private readonly conntrack: ConntrackFeed;
  private readonly diagnosis: IncrementalDiagnosis;
  /** Skips conntrack messages that touch no LB Service before decoding them (most of a busy table). */
  private prefilter: ConntrackPrefilter;
  readonly table: ConntrackTable;
  private counter?: Counter;
  private readonly captureHealth: CaptureHealth;
  private timers: NodeJS.Timeout[] = [];
  private readonly diagnoseSoon = new DiagnoseSchedule(() => this.diagnose());
  /** The first sync is done (/readyz). */
  ready = false;
  /** The prefilter targets' LB VIP:ports for the coverage check; the endpoint list is needed only to build it. */
  private vips: AddressPort[];
  /** A VIP new to the index gets a full conntrack read for its existing connections, paced (vip-coverage.ts). */
  private readonly newVipReads: NewVipReads;
  readonly ifname?: string;

  constructor(private readonly o: AgentOptions) {
    this.newVipReads = new NewVipReads({
      maxGapMs: o.conntrackResyncIntervalS * 1000,
      read: () => {
        this.o.log.info('LB VIPs joined since the last conntrack read: reading the table again for their connections');
        void this.fullConntrackRead();
      },
    });
    this.diagnosis = new IncrementalDiagnosis(o.log);
    this.sources = new AgentSources({
      nodeName: o.nodeName,
      log: o.log,
      ...(o.clusterFile ? { clusterFile: o.clusterFile } : {}),
      ...(o.kubeconfig ? { kubeconfig: o.kubeconfig } : {}),
      clusterApi: o.clusterApi,
      live: { ...(o.netns ? { netns: o.netns } : {}), ...(o.dnsLookup ? { dnsLookup: o.dnsLookup } : {}) },
      ...(o.inputs ? { readers: o.inputs.readers } : {}),
      onChange: () => this.diagnosis.stale(),
      onIndex: (index) => this.useIndex(index),
      onWatchedRead: () => this.diagnose(),
    });
    this.captureHealth = new CaptureHealth(this.sources.health);
    const index = this.sources.index;
    this.table = new ConntrackTable(index);
    const ours = index.ours();
    this.vips = ours.vips;
    this.prefilter = new ConntrackPrefilter(ours);
    this.conntrack =
      o.inputs?.conntrack ??
      new LiveConntrack({
        log: o.log,
        ...(o.netns ? { netns: o.netns } : {}),
        kernelFilter: o.conntrackKernelFilter ?? true,
      });
    this.ifname = o.ifname ?? (o.netns || o.inputs ? undefined : defaultRouteInterface());
  }

  /** What counts the LB-path packets, e.g. "eBPF (tcx) on eth0", or why nothing does. */
  get captureDescription(): string {
    if (this.counter) return this.counter.description;
    return `off (${this.o.capture === 'off' ? '--capture off' : (this.health.reasonOf('capture') ?? 'not started')})`;
  }

  get health(): SourceHealth {
    return this.sources.health;
  }

  async start(): Promise<void> {
    // The first index is built after every read and the pages the reads left resident are given back.
    await this.sources.start(() => this.o.onStartupPhase?.('sources read'));
    this.newVipReads.readFor(this.vips);
    this.startCapture();
    // Every port is diagnosed before the dump, so the first sync re-diagnoses only the ports its entries touch.
    this.diagnosis.prime(() => this.prepareDiagnosis());
    await this.conntrack.start(
      {
        table: this.table,
        record: (result, ms) => this.sources.runner.record('conntrack', result, ms),
        down: (reason) => this.health.down('conntrack', reason),
        changed: () => this.scheduleDiagnose('events'),
      },
      this.prefilter,
    );
    this.ready = true;
    // The index may have gained VIPs while the first read ran with the targets it started with.
    this.newVipReads.changed(this.vips);
    this.sources.synced();
    this.o.log.info({ services: this.sources.index.services.length, kept: this.table.size }, 'first sync done');
    this.o.onStartupPhase?.('first sync');
    this.diagnose();
    this.timers = [
      setInterval(() => void this.resync(), this.o.resyncIntervalS * 1000).unref(),
      setInterval(() => void this.fullConntrackRead(), this.o.conntrackResyncIntervalS * 1000).unref(),
    ];
  }

  /** Detaches the programs and closes every socket; idempotent. */
  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.diagnoseSoon.cancel();
    this.newVipReads.stop();
    this.conntrack.stop();
    this.counter?.close();
    await this.sources.stop();
  }

  /** Full re-read of every polled source. */
  async resync(): Promise<void> {
    await this.sources.resync();
    this.diagnose();
  }

  /** A full conntrack read, for the VIPs the index holds now. */
  private async fullConntrackRead(): Promise<void> {
    this.newVipReads.readFor(this.vips);
    await this.conntrack.resync();
    this.diagnose();
  }

  find(namespace: string, name: string, port?: number) {
    return this.sources.index.find(namespace, name, port);
  }

  /** What /metrics reads at a scrape (the counters are read then, so /metrics is never older than the scrape). */
  metricsState(): AgentState {
    return {
      nodeName: this.o.nodeName,
      version: this.o.version,
      sources: this.sources.runner,
      index: this.sources.index,
      counter: this.counter,
      captureRead: this.captureHealth.read,
      table: this.table,
      findings: this.diagnosis.findings,
    };
  }

  /** A new Service index: the table, the conntrack prefilter and the counters follow it. */
  private useIndex(index: ServiceIndex): void {
    this.diagnosis.stale();
    this.table.reindex(index);
    const ours = index.ours();
    this.vips = ours.vips;
    this.prefilter = new ConntrackPrefilter(ours);
    this.conntrack.setPrefilter(this.prefilter);
    if (this.ready) this.newVipReads.changed(this.vips);
    if (this.counter) {
      try {
        this.applyTargets(this.counter, packetTargets(ours));
      } catch (e) {
        this.health.down('capture', `updating targets: ${errText(e)}`);
      }
    }
    this.scheduleDiagnose('index');
  }

  private startCapture(): void {
    const { capture } = this.o;
    if (capture === 'off') return;
    if (!this.ifname) {
      this.health.down('capture', 'no uplink: pass --interface (no default route found)');
      return;
    }
    try {
      this.counter = openCounter(counterOptions(this.o, capture, this.ifname));
      this.applyTargets(this.counter, this.sources.index.targets());
      this.o.log.info({ counter: this.counter.description }, 'counters running');
    } catch (e) {
      this.counter?.close();
      this.counter = undefined;
      this.health.down('capture', errText(e));
    }
  }

  /** The counters' targets, within what the backend can count; the capture source says what it cannot. */
  private applyTargets(counter: Counter, all: Targets): void {
    const max = counter.maxVipsPerFamily ?? Infinity;
    const { targets, notCounted } = withinVipCapacity(all, max);
    counter.setTargets(targets);
    const notes = [
      counter.fallbackReason,
      notCounted ? `${notCounted} LB VIP:ports not counted: the eBPF maps hold ${max} per address family` : undefined,
    ].filter((n): n is string => !!n);
    this.captureHealth.applied(notes.length ? notes.join('; ') : undefined, counter.stopped);
  }

  private scheduleDiagnose(why: 'events' | 'index'): void {
    if (this.ready) this.diagnoseSoon.request(why);
  }

  private diagnose(): void {
    this.diagnosis.run(() => this.prepareDiagnosis(), this.table.entries());
  }

  private prepareDiagnosis(): PreparedDiagnosis {
    const snapshot = this.sources.runner.snapshot({
      takenAt: new Date().toISOString(),
      hostname: hostname(),
      kernel: release(),
    });
    // The view's LB-Service index is the one the Service index was built on: built once per view.
    return prepareDiagnosis(diagnoseInputOf(snapshot, this.sources.view), this.sources.index.lb);
  }
}
