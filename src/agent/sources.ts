// The agent's non-conntrack inputs (polled sources, the cluster view): it tells of changed values and of a new index.

import { reloadClusterFile } from '../cluster/file.js';
import { lbHostnamesOf, withLbHostnames } from '../cluster/lb-hostnames.js';
import { LbServiceIndex } from '../cluster/lb-index.js';
import type { ClusterView } from '../cluster/types.js';
import type { ClusterWatch } from '../cluster/watch.js';
import { localAddresses } from '../detect/local.js';
import { errText } from '../errors.js';
import type { AddressSnapshot } from '../kernel/types.js';
import type { Logger } from '../log.js';
import type { LiveOptions, SourceDef, SourceReader } from '../source/contract.js';
import { type DnsSnapshot, lookupsByName } from '../source/dns.js';
import type { SourceHealth } from '../source/health.js';
import { liveReaders } from '../source/list.js';
import { SourceRunner } from '../source/runner.js';
import { ServiceIndex } from './service-index.js';

/** A source as the agent polls it: its definition (what it feeds) and one implementation. */
export interface PolledSource {
  def: SourceDef<unknown>;
  reader: SourceReader;
}

export interface SourcesOptions {
  nodeName: string;
  log: Logger;
  clusterFile?: string;
  kubeconfig?: string;
  /** Use the API (in-cluster or --kubeconfig) when there is no cluster file. */
  clusterApi: boolean;
  /** The live readers' options (netns, DNS bounds); the agent's own choices are added. */
  live?: Pick<LiveOptions, 'netns' | 'dnsLookup'>;
  /** Readers to poll instead of the live ones (a bundle's files: the golden test). */
  readers?: (lbHostnames: () => readonly string[]) => PolledSource[];
  /** A new value, or a new availability, of a source: what was built from the sources is stale. */
  onChange(): void;
  /** A new Service index (the cluster view or a source it is built from changed). */
  onIndex(index: ServiceIndex): void;
  /** A source re-read because its watch or the cluster view asked (what to do after it: diagnose). */
  onWatchedRead(): void;
}

/** A kernel notification asks for a re-read of its source at most this often. */
const WATCH_DELAY_MS = 100;

export class AgentSources {
  readonly runner: SourceRunner;
  private readonly readers: PolledSource[];
  private stopWatches: (() => void)[] = [];
  private readTimers = new Map<string, NodeJS.Timeout>();
  private cluster: ClusterView = { fresh: false, staleReason: 'not read yet', services: [], warnings: [] };
  /** `cluster` with the hostname-only LBs' resolved addresses (dns source): what index and diagnosis read. */
  view: ClusterView = this.cluster;
  private clusterFileDigest?: string;
  private clusterWatch?: ClusterWatch;
  index: ServiceIndex;
  /** After the first sync a changed view has its LB names looked up at once (before it, start() reads them). */
  private started = false;
  /** During start() changes only mark the index stale, so it is built once from view and sources together. */
  private indexDeferred = false;
  private indexStale = false;

  constructor(private readonly o: SourcesOptions) {
    this.runner = new SourceRunner(o.log);
    const lbHostnames = () => lbHostnamesOf(this.cluster);
    // natFactsOnly: the agent diagnoses from the NAT facts alone; it never keeps the parsed rules.
    this.readers =
      o.readers?.(lbHostnames) ??
      liveReaders({ ...o.live, natFactsOnly: true, lbHostnames }, (d) => !d.streamedByAgent);
    this.index = new ServiceIndex(this.cluster, localAddresses(undefined, undefined));
  }

  get health(): SourceHealth {
    return this.runner.health;
  }

  /** The view, every source (index sources first), `afterReads`, then the one index build and the watches. */
  async start(afterReads?: () => void): Promise<void> {
    this.indexDeferred = true;
    try {
      await this.startCluster();
      await this.readSources(this.readers.filter((x) => x.def.indexes));
      await this.readSources(this.readers.filter((x) => !x.def.indexes));
      afterReads?.();
    } finally {
      this.indexDeferred = false;
    }
    if (this.indexStale) this.rebuildIndex();
    for (const x of this.readers) {
      const stop = x.reader.watch?.({
        changed: () => this.scheduleRead(x),
        failed: (reason) => this.health.down(x.def.name, reason),
      });
      if (stop) this.stopWatches.push(stop);
    }
  }

  /** The first sync is done: from now on a new cluster view has its LB names looked up at once. */
  synced(): void {
    this.started = true;
  }

  /** Full re-read of every polled source and of the cluster file. */
  async resync(): Promise<void> {
    if (this.o.clusterFile) this.loadClusterFile();
    await this.readSources(this.readers);
  }

  async stop(): Promise<void> {
    for (const t of this.readTimers.values()) clearTimeout(t);
    for (const stop of this.stopWatches) stop();
    await this.clusterWatch?.stop();
  }

  private async startCluster(): Promise<void> {
    if (this.o.clusterFile) return this.loadClusterFile();
    if (!this.o.clusterApi) {
      this.health.down('cluster', 'no cluster source: pass --cluster-file or --kubeconfig (or run in a pod)');
      return;
    }
    try {
      // Loaded only for the API; the node side's client is our own (cluster/kube-config.ts).
      const { ClusterWatch } = await import('../cluster/watch.js');
      this.clusterWatch = new ClusterWatch({
        nodeName: this.o.nodeName,
        ...(this.o.kubeconfig ? { kubeconfig: this.o.kubeconfig } : {}),
        log: this.o.log,
        onChange: (v) => this.setCluster(v),
      });
      this.clusterWatch.start();
      // Wait a little for the first list; the agent starts degraded if the API is slow or away.
      const first = await Promise.race([
        this.clusterWatch.synced(),
        new Promise<undefined>((r) => setTimeout(() => r(undefined), 10_000).unref()),
      ]);
      if (first) this.setCluster(first);
      else
        this.health.down(
          'cluster',
          `Kubernetes API: first list not complete after 10 s: ` +
            `${this.clusterWatch.status().reason ?? 'no reason known'}`,
        );
    } catch (e) {
      this.health.down('cluster', errText(e));
    }
  }

  private loadClusterFile(): void {
    try {
      // Rebuilt only when the file changed, since new indexes are costly while the old ones are still alive.
      const r = reloadClusterFile(this.o.clusterFile!, this.clusterFileDigest, { nodeName: this.o.nodeName });
      if (r.view) this.setCluster(r.view);
      this.clusterFileDigest = r.digest;
      this.health.resynced('cluster');
    } catch (e) {
      this.health.down('cluster', errText(e));
    }
  }

  private setCluster(v: ClusterView): void {
    // The watch hands its first view both to synced() and to onChange: the same view is no change.
    if (v === this.cluster) return;
    const before = this.cluster.services.length;
    this.cluster = v;
    if (v.fresh) this.health.up('cluster');
    else this.health.down('cluster', v.staleReason ?? 'stale', false);
    if (v.services.length !== before) this.o.log.info({ servicePorts: v.services.length }, 'cluster view changed');
    this.rebuildIndex();
    // New LB names are looked up at once.
    if (this.started) for (const x of this.readers) if (x.def.followsCluster) this.scheduleRead(x);
  }

  private scheduleRead(x: PolledSource): void {
    clearTimeout(this.readTimers.get(x.def.name));
    const t = setTimeout(() => {
      this.readTimers.delete(x.def.name);
      void this.readSources([x]).then(() => this.o.onWatchedRead());
    }, WATCH_DELAY_MS);
    this.readTimers.set(x.def.name, t);
  }

  /** Reads sources via the runner; changes are told, index inputs rebuild the index, unchanged input tells nothing. */
  private async readSources(list: readonly PolledSource[]): Promise<void> {
    const outcomes = await this.runner.readAll(list.map((x) => x.reader));
    let changed = false;
    let reindex = false;
    outcomes.forEach((o, i) => {
      if (!o.changed) return;
      changed = true;
      if (list[i]!.def.indexes && (o.result.state !== 'down' || o.result.value !== undefined)) reindex = true;
    });
    if (changed) this.o.onChange();
    if (reindex) this.rebuildIndex();
  }

  private rebuildIndex(): void {
    if (this.indexDeferred) {
      this.indexStale = true;
      return;
    }
    this.indexStale = false;
    this.view = withLbHostnames(this.cluster, lookupsByName(this.runner.value<DnsSnapshot>('dns')));
    // Only the addresses changed: the view's LB-Service index stays.
    const lb = this.index.lb.view === this.view ? this.index.lb : new LbServiceIndex(this.view);
    this.index = new ServiceIndex(
      this.view,
      localAddresses(this.runner.value<AddressSnapshot>('addresses'), this.cluster.node),
      lb,
    );
    this.o.onIndex(this.index);
  }
}
