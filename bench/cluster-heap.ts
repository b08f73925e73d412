// The agent's heap for the cluster side alone, without namespaces, root or a conntrack table:
//   node --expose-gc --import tsx bench/cluster-heap.ts [--services 5000] [--endpoints 20000] [--snapshot FILE] [--long-node-names]
// The synthetic cluster of bench/agent.ts (bench/agent-cluster.ts, with managedFields as the API
// server sends them) goes through what the agent does with it: each list page JSON-parsed (the
// strings the stores keep come from JSON.parse, as in cluster/kube-api.ts), each object parsed by
// the watch's parsers into one store per kind (cluster/watch.ts), the view assembled, and the
// LB-Service index and the agent's Service index built over it. Printed: live heap after a full
// GC at each step (MB), so a change to the views or indexes is measured in seconds, repeatably.
// --long-node-names: the other nodes named as on EKS ("ip-10-0-0-17.eu-west-1.compute.internal")
// instead of "node-17": JSON.parse interns strings of up to 10 characters, not longer ones.
import { writeHeapSnapshot } from 'node:v8';
import { assembleClusterView, parsersFor, type ParsedObjects } from '../src/cluster/build.js';
import { LbServiceIndex } from '../src/cluster/lb-index.js';
import { ObjectStore } from '../src/cluster/object-store.js';
import { ServiceIndex } from '../src/agent/service-index.js';
import { BENCH_NODE, syntheticCluster } from './agent-cluster.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc');

const argv = process.argv.slice(2);
const num = (name: string, def: number): number => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : def;
};
const services = num('--services', 5000);
const endpoints = num('--endpoints', 20_000);
const snapshotAt = argv.includes('--snapshot') ? argv[argv.indexOf('--snapshot') + 1] : undefined;
const longNodeNames = argv.includes('--long-node-names');

function live(): number {
  gc!();
  gc!();
  return process.memoryUsage().heapUsed;
}
const mb = (b: number): string => (b / 1024 / 1024).toFixed(2);

type Item = { kind: string; metadata: { name: string; namespace?: string } };
const PAGE = 500;

/** The items of one kind as JSON pages (what the API server sends), built before the baseline. */
function pagesOf(items: Item[], kind: string): string[] {
  const mine = items.filter((i) => i.kind === kind);
  const pages: string[] = [];
  for (let i = 0; i < mine.length; i += PAGE) pages.push(JSON.stringify({ items: mine.slice(i, i + PAGE) }));
  return pages;
}

const parse = parsersFor(BENCH_NODE.name);
const base = live();
type Pages = Record<'services' | 'endpointSlices' | 'nodes', string[]>;
function makePages(): Pages {
  const items = syntheticCluster(services, endpoints, { managedFields: true }).list.items as Item[];
  if (longNodeNames) {
    for (const item of items as (Item & { endpoints?: { nodeName?: string }[] })[]) {
      for (const ep of item.endpoints ?? []) {
        const n = /^node-(\d+)$/.exec(ep.nodeName ?? '')?.[1];
        if (n !== undefined) ep.nodeName = `ip-10-0-${n}-17.eu-west-1.compute.internal`;
      }
    }
  }
  return { services: pagesOf(items, 'Service'), endpointSlices: pagesOf(items, 'EndpointSlice'), nodes: pagesOf(items, 'Node') };
}
let pages: Pages | undefined = makePages();
const withPages = live();

const stores = { services: new ObjectStore<unknown>(), endpointSlices: new ObjectStore<unknown>(), nodes: new ObjectStore<unknown>() };
for (const kind of ['services', 'endpointSlices', 'nodes'] as const) {
  for (const text of pages[kind]) {
    for (const item of (JSON.parse(text) as { items: Item[] }).items) {
      const p = parse[kind]({ origin: kind, object: item });
      stores[kind].set(item.metadata.namespace ?? '', item.metadata.name, p);
    }
  }
}
pages = undefined;
const afterStores = live();

const view = assembleClusterView(
  {
    services: stores.services.values(),
    endpointSlices: stores.endpointSlices.values(),
    ingresses: [],
    nodes: stores.nodes.values(),
  } as ParsedObjects,
  { nodeName: BENCH_NODE.name },
);
const afterView = live();
const lb = new LbServiceIndex(view);
const afterLb = live();
const index = new ServiceIndex(view, { nodeIps: [BENCH_NODE.ip], ipvsIps: [], podCidrs: [BENCH_NODE.podCidr] }, lb);
const afterIndex = live();

const endpointCount = view.services.reduce((n, s) => n + s.endpoints.length, 0);
console.log(`${services} Services, ${endpoints} endpoints: ${view.services.length} Service ports, ${endpointCount} endpoints over the ports`);
console.log(`(list pages as JSON text          ${mb(withPages - base)} MB)`);
console.log(`watch stores (parsed objects)   ${mb(afterStores - base)} MB`);
console.log(`+ cluster view                  ${mb(afterView - afterStores)} MB`);
console.log(`+ LB-Service index              ${mb(afterLb - afterView)} MB`);
console.log(`+ Service index                 ${mb(afterIndex - afterLb)} MB`);
console.log(`total                           ${mb(afterIndex - base)} MB`);
if (snapshotAt) console.log(`heap snapshot: ${writeHeapSnapshot(snapshotAt)}`);
// Kept alive to here: the figures above are of live objects.
if (index.services.length < 0) console.log(stores);
