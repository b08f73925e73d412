// One typed snapshot of the node's datapath: every reader runs, each reports
// its own status, and one unavailable source never hides the others.
import { hostname, release } from 'node:os';
import { readAddresses } from './addresses.js';
import { readConntrack, type ConntrackFilter } from './conntrack/dump.js';
import { readIpvs } from './ipvs/reader.js';
import { readNat } from './nat/read.js';
import type { NodeSnapshot } from './types.js';

export interface SnapshotOptions {
  /** Path of a network namespace to read instead of our own (labs, tests). */
  netns?: string;
  /** Keep conntrack entries (else only the summary). */
  conntrackEntries?: boolean;
  conntrackFilter?: ConntrackFilter;
}

export async function takeSnapshot(opts: SnapshotOptions = {}): Promise<NodeSnapshot> {
  const ns = opts.netns ? { netns: opts.netns } : {};
  const [addr, ct, ipvs, nat] = await Promise.all([
    readAddresses(ns),
    readConntrack({
      ...ns,
      ...(opts.conntrackEntries ? { entries: true } : {}),
      ...(opts.conntrackFilter ? { filter: opts.conntrackFilter } : {}),
    }),
    // A corrupt IPVS reply must not take the other sources down with it.
    readIpvs(ns).catch((e: unknown) => ({
      status: { source: 'ipvs' as const, available: false, reason: e instanceof Error ? e.message : String(e) },
      snapshot: undefined,
    })),
    readNat(ns),
  ]);
  const snap: NodeSnapshot = {
    takenAt: new Date().toISOString(),
    hostname: hostname(),
    kernel: release(),
    sources: [addr.status, ipvs.status, ct.status, ...nat.sources],
  };
  if (addr.snapshot) snap.addresses = addr.snapshot;
  if (ipvs.snapshot) snap.ipvs = ipvs.snapshot;
  if (ct.summary) snap.conntrack = { summary: ct.summary, ...(ct.entries ? { entries: ct.entries } : {}) };
  if (nat.nat) snap.nat = nat.nat;
  return snap;
}
