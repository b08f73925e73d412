// One typed snapshot of the node's datapath: each live source read once with its own status, none hiding the others.
import { hostname, release } from 'node:os';
import type { LiveOptions } from './contract.js';
import { liveReaders } from './list.js';
import type { NodeSnapshot } from './node-snapshot.js';
import { SourceRunner } from './runner.js';

/** Without lbHostnames the dns source is not read. */
export async function takeSnapshot(opts: LiveOptions = {}): Promise<NodeSnapshot> {
  const runner = new SourceRunner();
  await runner.readAll(liveReaders(opts).map((x) => x.reader));
  return runner.snapshot({ takenAt: new Date().toISOString(), hostname: hostname(), kernel: release() });
}
