// Loads a fixture case of test/fixtures/bundles/<case>/: the cluster as
// kubectl prints it (cluster.json), the node as `clbprobe snapshot --json
// --conntrack` prints it (node.json), and kube-proxy's rules by reference to
// the shared NAT fixtures (test/fixtures/nat), parsed by the NAT reader's parsers.
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { loadClusterFile } from '../../../src/cluster/file.js';
import { withLbHostnames } from '../../../src/cluster/lb-hostnames.js';
import type { HostnameLookup } from '../../../src/cluster/types.js';
import { diagnoseInputOf } from '../../../src/detect/input.js';
import type { DiagnoseInput } from '../../../src/detect/types.js';
import { parseIpsetSave } from '../../../src/kernel/nat/ipset.js';
import { parseIptablesSave } from '../../../src/kernel/nat/iptables-save.js';
import type { BackendEvidence, NatSnapshot } from '../../../src/kernel/nat/types.js';
import { localRoutesOf } from '../../../src/source/local-routes.js';
import type { NodeSnapshot } from '../../../src/source/node-snapshot.js';

export const BUNDLES = resolve(dirname(new URL(import.meta.url).pathname), '../../fixtures/bundles');

export interface Expectation {
  service: string;
  mechanism: string;
  severity: string;
}

export interface FixtureCase {
  description: string;
  nodeName: string;
  nat?: { v4?: string; v6?: string; ipset?: string };
  /** `ip -j route show table local` captures (paths relative to the case), read as the local-routes source reads them. */
  localRoutes?: { v4?: string; v6?: string };
  /** What the node's resolver answered for hostname-only LBs (the agent's lookups). */
  dns?: HostnameLookup[];
  expect: Expectation[];
  absent: Expectation[];
}

const noEvidence: BackendEvidence = { ruleLines: 0, kubeRuleLines: 0, kubeletChains: false };

/** The NAT snapshot of saved rule files, as the reader would have built it (backend from the file name). */
export function natFromFiles(dir: string, files: NonNullable<FixtureCase['nat']>): NatSnapshot {
  const read = (f: string): string => readFileSync(join(dir, f), 'utf8');
  const backend = (files.v4 ?? files.v6 ?? '').includes('legacy') ? 'legacy' : 'nft';
  return {
    backend,
    backendChoice: { backend, reason: 'fixture', legacy: noEvidence, nft: noEvidence },
    ...(files.v4 ? { v4: parseIptablesSave(read(files.v4), { source: files.v4, family: 4 }) } : {}),
    ...(files.v6 ? { v6: parseIptablesSave(read(files.v6), { source: files.v6, family: 6 }) } : {}),
    ...(files.ipset ? { ipsets: parseIpsetSave(read(files.ipset), files.ipset) } : {}),
    warnings: [],
  };
}

export function loadCase(name: string): { c: FixtureCase; input: DiagnoseInput } {
  const dir = join(BUNDLES, name);
  const c = JSON.parse(readFileSync(join(dir, 'case.json'), 'utf8')) as FixtureCase;
  const node = JSON.parse(readFileSync(join(dir, 'node.json'), 'utf8')) as NodeSnapshot;
  if (c.nat) node.nat = natFromFiles(dir, c.nat);
  if (c.localRoutes) {
    const files = [
      [c.localRoutes.v4, 4],
      [c.localRoutes.v6, 6],
    ] as const;
    node.localRoutes = {
      routes: files.flatMap(([f, fam]) => (f ? localRoutesOf(readFileSync(join(dir, f), 'utf8'), f, fam).routes : [])),
    };
  }
  const listed = loadClusterFile(join(dir, 'cluster.json'), { nodeName: c.nodeName });
  const cluster = c.dns ? withLbHostnames(listed, new Map(c.dns.map((l) => [l.hostname, l]))) : listed;
  const entries = node.conntrack?.entries;
  return { c, input: { ...diagnoseInputOf(node, cluster), ...(entries ? { conntrack: entries } : {}) } };
}
