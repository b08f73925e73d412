// One typed snapshot of the node's datapath: every reader runs, each reports
// its own status, and one unavailable source never hides the others.
import { hostname, release } from 'node:os';
import { readAddresses } from './addresses.js';
import { readConntrack, type ConntrackFilter } from './conntrack/dump.js';
import type { NodeSnapshot } from './types.js';

export interface SnapshotOptions {
  /** Path of a network namespace to read instead of our own (labs, tests). */
  netns?: string;
  /** Keep conntrack entries (else only the summary). */
  conntrackEntries?: boolean;
  conntrackFilter?: ConntrackFilter;
}

/** Optional readers owned by other modules, plugged in by name. */
export interface ExtraReaders {
  ipvs?: (o: { netns?: string }) => Promise<Pick<NodeSnapshot, 'ipvs'> & { status: NodeSnapshot['sources'][number] }>;
  nat?: (o: { netns?: string }) => Promise<Pick<NodeSnapshot, 'nat'> & { sources: NodeSnapshot['sources'] }>;
}

export async function takeSnapshot(opts: SnapshotOptions = {}, extra: ExtraReaders = {}): Promise<NodeSnapshot> {
  const ns = opts.netns ? { netns: opts.netns } : {};
  const [addr, ct, ipvs, nat] = await Promise.all([
    readAddresses(ns),
    readConntrack({
      ...ns,
      ...(opts.conntrackEntries ? { entries: true } : {}),
      ...(opts.conntrackFilter ? { filter: opts.conntrackFilter } : {}),
    }),
    extra.ipvs?.(ns),
    extra.nat?.(ns),
  ]);
  const snap: NodeSnapshot = {
    takenAt: new Date().toISOString(),
    hostname: hostname(),
    kernel: release(),
    sources: [addr.status, ...(ipvs ? [ipvs.status] : []), ct.status, ...(nat?.sources ?? [])],
  };
  if (addr.snapshot) snap.addresses = addr.snapshot;
  if (ipvs?.ipvs) snap.ipvs = ipvs.ipvs;
  if (ct.summary) snap.conntrack = { summary: ct.summary, ...(ct.entries ? { entries: ct.entries } : {}) };
  if (nat?.nat) snap.nat = nat.nat;
  return snap;
}
