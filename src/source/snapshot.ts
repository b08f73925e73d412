// One typed snapshot of the node's datapath: each live source read once with its own status, none hiding the others.
import { hostname, release } from 'node:os';
import type { ConntrackFilter } from '../kernel/conntrack/dump.js';
import { liveReaders } from './list.js';
import type { NodeSnapshot } from './node-snapshot.js';
import { SourceRunner } from './runner.js';

export interface SnapshotOptions {
  /** Path of a network namespace to read instead of our own (labs, tests). */
  netns?: string;
  /** Keep conntrack entries (else only the summary). */
  conntrackEntries?: boolean;
  conntrackFilter?: ConntrackFilter;
  /** The hostname-only LB names to look up (the dns source); without them it is not read. */
  lbHostnames?: () => readonly string[];
}

export async function takeSnapshot(opts: SnapshotOptions = {}): Promise<NodeSnapshot> {
  const runner = new SourceRunner();
  await runner.readAll(liveReaders(opts).map((x) => x.reader));
  return runner.snapshot({ takenAt: new Date().toISOString(), hostname: hostname(), kernel: release() });
}
