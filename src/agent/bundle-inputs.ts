// A bundle as the agent's inputs: each polled source reads its files via fromBundle, so the agent runs unprivileged.
import { readdirSync } from 'node:fs';
import { BundleFiles } from '../bundle/files.js';
import { BUNDLE_FILES } from '../bundle/names.js';
import { bundleReader } from '../source/contract.js';
import { SOURCES } from '../source/list.js';
import { BundleConntrack, type ConntrackFeed } from './conntrack-feed.js';
import type { PolledSource } from './sources.js';

export interface BundleInputs {
  readers: () => PolledSource[];
  conntrack: ConntrackFeed;
  /** The bundle's cluster.json, when it has one (pass it as the agent's cluster file). */
  clusterFile?: string;
}

/** The agent's inputs from bundle directory `dir`: the sources the live agent polls, and conntrack. */
export function bundleInputs(dir: string, opts: { seenAtMs?: () => number } = {}): BundleInputs {
  const b = new BundleFiles(dir, readdirSync(dir));
  return {
    readers: () =>
      SOURCES.filter((d) => d.live && d.fromBundle && !d.streamedByAgent).map((def) => ({
        def,
        reader: bundleReader(def, b),
      })),
    conntrack: new BundleConntrack(b, opts.seenAtMs),
    ...(b.has(BUNDLE_FILES.cluster) ? { clusterFile: b.path(BUNDLE_FILES.cluster) } : {}),
  };
}
