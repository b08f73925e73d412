// A bundle as the agent's inputs: each polled source reads its files via fromBundle, so the agent runs unprivileged.
import { readdirSync } from 'node:fs';
import { BundleFiles } from '../bundle/files.js';
import { BUNDLE_FILES } from '../bundle/names.js';
import { bundleReader } from '../source/contract.js';
import { SOURCES } from '../source/list.js';
import { BundleConntrack } from './conntrack-feed.js';
import type { PolledSource } from './sources.js';

/** The agent's inputs from bundle directory `dir`: the sources it polls, conntrack, and cluster.json when present. */
export function bundleInputs(dir: string, opts: { seenAtMs?: () => number } = {}) {
  const b = new BundleFiles(dir, readdirSync(dir));
  return {
    readers: (): PolledSource[] =>
      SOURCES.filter((d) => d.live && d.fromBundle && !d.streamedByAgent).map((def) => ({
        def,
        reader: bundleReader(def, b),
      })),
    conntrack: new BundleConntrack(b, opts.seenAtMs),
    ...(b.has(BUNDLE_FILES.cluster) ? { clusterFile: b.path(BUNDLE_FILES.cluster) } : {}),
  };
}
