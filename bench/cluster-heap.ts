// The agent's heap for the cluster side alone, without namespaces, root or a conntrack table:
//   node --expose-gc --import tsx bench/cluster-heap.ts [--services 5000] [--endpoints 20000] [--snapshot FILE] [--long-node-names]
// The synthetic cluster of bench/agent.ts (bench/agent-cluster.ts, with managedFields as the API
// server sends them) goes through what the agent does with it: each list page JSON-parsed (the
// strings the stores keep come from JSON.parse, as in cluster/kube-api.ts), each object parsed by
// the watch's parsers into one store per kind (cluster/watch.ts), the view assembled, and the
// LB-Service index and the agent's Service index built over it, then what the agent builds from
// that index at every rebuild (the conntrack prefilter and the counters' targets), and the first
// diagnosis of every Service port, as `diagnose` and as the agent runs it. Printed: live
// heap after a full GC at each step (MB), so a change to the views or indexes is measured in
// seconds, repeatably; and the bytes each step allocated, garbage included: what the agent's heap
// must hold at once at start, where its peak RSS is. Allocation is read as the heap's growth over
// the step, so no GC may run inside it: the young generation is made large enough by the flags
// below, and a step during which one ran says so.
//   node --expose-gc --min-semi-space-size=256 --max-semi-space-size=256 --max-opt=2 --import tsx bench/cluster-heap.ts
// (--max-opt=2 as the DaemonSet runs: code that V8 does not optimise allocates more, e.g. an
// iterator result per element of a for-of loop.)
// --long-node-names: the other nodes named as on EKS ("ip-10-0-0-17.eu-west-1.compute.internal")
// instead of "node-17": JSON.parse interns strings of up to 10 characters, not longer ones.
import { PerformanceObserver } from 'node:perf_hooks';
import { writeHeapSnapshot } from 'node:v8';
import { IncrementalDiagnosis } from '../src/agent/diagnosis.js';
import { ServiceIndex } from '../src/agent/service-index.js';
import { TARGET_MAPS, TargetSync } from '../src/capture/ebpf-maps.js';
import { packetTargets } from '../src/capture/targets.js';
import { assembleClusterView, NO_GATEWAY_API, type ParsedObjects, parsersFor } from '../src/cluster/build.js';
import { LbServiceIndex } from '../src/cluster/lb-index.js';
import { ObjectStore } from '../src/cluster/object-store.js';
import { Diagnosis, prepareDiagnosis } from '../src/detect/index.js';
import { diagnoseInputOf } from '../src/detect/input.js';
import { ConntrackPrefilter } from '../src/kernel/conntrack/prefilter.js';
import { createLogger } from '../src/log.js';
import type { BpfAddon } from '../src/native/bpf.js';
import type { NodeSnapshot } from '../src/source/node-snapshot.js';
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
  return {
    services: pagesOf(items, 'Service'),
    endpointSlices: pagesOf(items, 'EndpointSlice'),
    nodes: pagesOf(items, 'Node'),
  };
}
let pages: Pages | undefined = makePages();
const withPages = live();

let gcs = 0;
const gcObserver = new PerformanceObserver((l) => (gcs += l.getEntries().length));
gcObserver.observe({ entryTypes: ['gc'] });
const settle = () => new Promise((r) => setTimeout(r, 10));
interface Step {
  name: string;
  kept: number;
  allocated: number;
  gcRan: boolean;
}
const steps: Step[] = [];
/** Runs f with the heap collected before: what it allocated (no GC inside) and what stays live after. */
async function step<T>(name: string, f: () => T): Promise<T> {
  const before = live();
  await settle();
  const gcsBefore = gcs;
  const r = f();
  const allocated = process.memoryUsage().heapUsed - before;
  await settle(); // the observer hears of a GC in the step on a later tick
  steps.push({ name, kept: live() - before, allocated, gcRan: gcs > gcsBefore });
  return r;
}

const stores = {
  services: new ObjectStore<unknown>(),
  endpointSlices: new ObjectStore<unknown>(),
  nodes: new ObjectStore<unknown>(),
};
for (const kind of ['services', 'endpointSlices', 'nodes'] as const) {
  await step(`${kind} list pages parsed into the store`, () => {
    for (const text of pages![kind]) {
      for (const item of (JSON.parse(text) as { items: Item[] }).items) {
        const p = parse[kind]({ origin: kind, object: item });
        stores[kind].set(item.metadata.namespace ?? '', item.metadata.name, p);
      }
    }
  });
}
pages = undefined;
const afterStores = live();

const view = await step('cluster view', () =>
  assembleClusterView(
    {
      services: stores.services.values(),
      endpointSlices: stores.endpointSlices.values(),
      ingresses: [],
      nodes: stores.nodes.values(),
      ...NO_GATEWAY_API,
    } as ParsedObjects,
    { nodeName: BENCH_NODE.name },
  ),
);
const lb = await step('LB-Service index', () => new LbServiceIndex(view));
const index = await step(
  'Service index',
  () => new ServiceIndex(view, { nodeIps: [BENCH_NODE.ip], ipvsIps: [], podCidrs: [BENCH_NODE.podCidr] }, lb),
);
const afterIndex = live();
// What the agent builds from each new index (agent.ts useIndex): all of it garbage by the next.
const targets = await step('what is ours', () => index.ours());
const prefilter = await step('conntrack prefilter', () => new ConntrackPrefilter(targets));
const counterTargets = await step("counters' targets", () => packetTargets(targets));
// The counters' first sync into a kernel that takes every write (agent.ts applyTargets): the start-up's burst.
const noKernel = { bpfMapUpdate: () => {}, bpfMapDelete: () => true } as unknown as BpfAddon;
const noFds = Object.fromEntries(TARGET_MAPS.map((m, i) => [m, i]));
await step("eBPF maps' first sync", () => new TargetSync(noKernel, noFds).sync(counterTargets));
// The first diagnosis, before any conntrack entry: the agent keeps only significant findings (agent/diagnosis.ts).
const node = {
  takenAt: new Date().toISOString(),
  hostname: BENCH_NODE.name,
  kernel: '',
  sources: [],
  addresses: {
    interfaces: [
      {
        index: 2,
        name: 'eth0',
        isKubeIpvs: false,
        addresses: [{ address: BENCH_NODE.ip, prefixLen: 24, family: 4, scope: 'global' }],
      },
    ],
  },
} as unknown as NodeSnapshot;
const prepared = prepareDiagnosis(diagnoseInputOf(node, view), lb);
const everyFinding = await step('diagnosis, every finding (diagnose)', () => new Diagnosis(prepared).finish());
const significant = new IncrementalDiagnosis(createLogger('silent'));
await step('diagnosis, significant only (the agent)', () => significant.prime(() => prepared));
gcObserver.disconnect();

const endpointCount = view.services.reduce((n, s) => n + s.endpoints.length, 0);
console.log(
  `${services} Services, ${endpoints} endpoints: ${view.services.length} Service ports, ${endpointCount} endpoints over the ports`,
);
console.log(`node ${process.version} ${process.execArgv.join(' ')}`);
console.log(`reference: the list pages as JSON text  ${mb(withPages - base)} MB`);
console.log(`${'step'.padEnd(48)} ${'live after'.padStart(10)} ${'allocated'.padStart(10)}`);
for (const s of steps) {
  const alloc = s.gcRan ? 'a GC ran' : `${mb(s.allocated)} MB`;
  console.log(`${s.name.padEnd(48)} ${`${mb(s.kept)} MB`.padStart(10)} ${alloc.padStart(10)}`);
}
console.log(
  `live: stores ${mb(afterStores - base)} MB, + view and indexes ${mb(afterIndex - afterStores)} MB = ${mb(afterIndex - base)} MB`,
);
if (steps.some((s) => s.gcRan))
  console.log('a GC ran inside a step: its allocation is not known; run with a larger --min-semi-space-size');
if (snapshotAt) console.log(`heap snapshot: ${writeHeapSnapshot(snapshotAt)}`);
// Kept alive to here: the figures above are of live objects.
if (index.services.length < 0) console.log(stores, prefilter, counterTargets, everyFinding, significant);
