// The list reader (src/cluster/json-reduce.ts) against other readers, in the same run:
//   node --import tsx bench/json-reduce.ts [--impl name=PATH ...] [--runs 3] [--cases services,endpointSlices,...]
//     [--node image|host|PATH]  (the children's node; default the image's, as bench/agent.ts)
// Readers: "src" (this tree's json-reduce.ts), "main" (main's, written to a temporary file by `git show`, when git
// has it), each --impl given (a module exporting JsonReducer), and "JSON.parse": the answer decoded and parsed
// whole, as kube-api.ts reads a body without a shape (the reference: what the platform does).
// Each case is a list answer streamed in 64 KiB chunks to a fresh child process, readers alternating in each round
// so that the host's load falls on all alike. Printed per case and reader, medians over the rounds:
//   cold ms: CPU of the first read in the process (the agent reads each list once, under --max-opt=2);
//   warm ms: CPU, median of the next reads;
//   peak MB: the process' highest RSS during the first read over its RSS before (heap and buffers together;
//   the high-water mark is reset through /proc/self/clear_refs);
//   alloc MB: heap and array buffers allocated by one read, garbage included (young generation made large
//   enough that no GC runs inside; a GC that ran anyway is flagged with "gc").
// CPU and peak run under the DaemonSet's node flags (deploy/daemonset.yaml), alloc under the same but a 256 MB
// semi-space and without --optimize-for-size (which keeps the semi-space small whatever the flags say).
// Ratios are against "main" when it is there, else against JSON.parse.
// Cases: 5,000 Services and 20,000 endpoints' EndpointSlices as the API server sends them (bench/agent-cluster.ts,
// with managedFields); 100 Services with a 12 MB annotation in one; one Service just under / just over the
// 16 MiB unit bound, as one long string or as 16,000 annotations of 1 KiB; 100 Services each with a value nested
// 200 deep in a field not read.
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { StringDecoder } from 'node:string_decoder';
import { fileURLToPath } from 'node:url';
import { DEFAULT_API_LIMITS } from '../src/cluster/kube-api.js';
import { listShape, OBJECT_SHAPES } from '../src/cluster/object-shapes.js';
import { errText } from '../src/errors.js';
import { syntheticCluster } from './agent-cluster.js';

const ALLOC_FLAGS = [
  '--max-old-space-size=2048',
  '--min-semi-space-size=256',
  '--max-semi-space-size=256',
  '--max-opt=2',
];
const CHUNK = 64 << 10;
const MIB = 1 << 20;
const LIMITS = { maxValueBytes: DEFAULT_API_LIMITS.maxValueBytes, maxUnitBytes: DEFAULT_API_LIMITS.maxEventBytes };
const HERE = fileURLToPath(import.meta.url);
const REFERENCE = 'JSON.parse';

type Item = { kind: string; metadata: Record<string, unknown> } & Record<string, unknown>;
interface Case {
  readonly shape: keyof typeof OBJECT_SHAPES;
  readonly items: () => Item[];
}

const synthetic = (kind: string): Item[] =>
  (syntheticCluster(5000, 20_000, { managedFields: true }).list.items as Item[]).filter((i) => i.kind === kind);
const someServices = (n: number): Item[] => synthetic('Service').slice(0, n);
/** A Service whose JSON is `bytes` long within a few bytes: the size in one string, or in values of 1 KiB. */
function serviceOfSize(bytes: number, manyValues: boolean): Item {
  const [svc] = someServices(1);
  const annotations = (svc!.metadata as { annotations: Record<string, string> }).annotations;
  let length = JSON.stringify(svc).length;
  if (!manyValues) annotations['example.com/blob'] = 'b'.repeat(bytes - length - 22);
  for (let n = 0; manyValues && length < bytes - 1100; n++) {
    const key = `example.com/a-${n}`;
    annotations[key] = 'v'.repeat(1024);
    length += key.length + 1024 + 6;
  }
  return svc!;
}
function nested(depth: number): unknown {
  let v: unknown = 'leaf';
  for (let d = 0; d < depth; d++) v = d % 2 ? [v] : { n: v };
  return v;
}

const CASES: Record<string, Case> = {
  services: { shape: 'services', items: () => synthetic('Service') },
  endpointSlices: { shape: 'endpointSlices', items: () => synthetic('EndpointSlice') },
  fat12MB: {
    shape: 'services',
    items: () => {
      const items = someServices(100);
      (items[50]!.metadata.annotations as Record<string, string>)['example.com/blob'] = 'b'.repeat(12_000_000);
      return items;
    },
  },
  underOneString: { shape: 'services', items: () => [serviceOfSize(16 * MIB - 1024, false)] },
  overOneString: { shape: 'services', items: () => [serviceOfSize(16 * MIB + 1024, false)] },
  underManyValues: { shape: 'services', items: () => [serviceOfSize(16 * MIB - 2048, true)] },
  overManyValues: { shape: 'services', items: () => [serviceOfSize(16 * MIB + 2048, true)] },
  deep: {
    shape: 'services',
    items: () => someServices(100).map((s) => ({ ...s, status: { deep: nested(200) } })),
  },
};

interface Measured {
  coldMs: number;
  warmMs: number;
  peakMB: number;
  allocMB: number;
  gcInAlloc: boolean;
  outcome: string;
}

type Reader = (chunks: Buffer[]) => unknown;

async function readerOf(impl: string, shape: Case['shape']): Promise<Reader> {
  if (impl === REFERENCE) {
    return (chunks) => {
      const decoder = new StringDecoder('utf8');
      const parts = chunks.map((c) => decoder.write(c));
      return JSON.parse(parts.join('') + decoder.end());
    };
  }
  const { JsonReducer } = (await import(impl)) as typeof import('../src/cluster/json-reduce.js');
  return (chunks) => {
    let value: unknown;
    const reader = new JsonReducer(listShape(OBJECT_SHAPES[shape]), LIMITS, (v) => (value = v));
    for (const c of chunks) reader.write(c);
    reader.end();
    return value;
  };
}

function cpuMs(f: () => void): number {
  const before = process.cpuUsage();
  f();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000;
}

/** What the read gave: how many items, how many skipped, or the error's start. */
function outcomeOf(read: () => unknown): string {
  try {
    const items = (read() as { items: unknown[] }).items;
    const skipped = items.filter((i) => (i as { reason?: unknown }).reason !== undefined).length;
    return `${items.length} items${skipped ? `, ${skipped} skipped` : ''}`;
  } catch (e) {
    return `error: ${errText(e).slice(0, 60)}`;
  }
}

/** The case's list answer, written once by the parent so that a child's peak is not the making of it. */
function writeCase(caseName: string): string {
  const items = CASES[caseName]!.items();
  const file = join(tmpdir(), `json-reduce-${caseName}-${process.pid}.json`);
  writeFileSync(file, JSON.stringify({ kind: 'List', metadata: { resourceVersion: '1' }, items }));
  return file;
}

/** In the child: the case's chunks read before any figure is taken, then one reader measured. */
async function child(impl: string, caseName: string, file: string, mode: 'cpu' | 'alloc'): Promise<void> {
  const text = readFileSync(file);
  const chunks: Buffer[] = [];
  for (let i = 0; i < text.length; i += CHUNK) chunks.push(text.subarray(i, i + CHUNK));
  const read = await readerOf(impl, CASES[caseName]!.shape);
  const gc = (globalThis as { gc?: () => void }).gc!;
  let gcs = 0;
  new PerformanceObserver((l) => (gcs += l.getEntries().length)).observe({ entryTypes: ['gc'] });
  gc();
  gc();
  await settle();
  gcs = 0;
  const out: Partial<Measured> = {};
  if (mode === 'alloc') {
    const before = process.memoryUsage();
    let peakBuffers = 0;
    out.outcome = outcomeOf(() => {
      const v = read(chunks);
      peakBuffers = process.memoryUsage().arrayBuffers - before.arrayBuffers;
      return v;
    });
    const after = process.memoryUsage();
    out.allocMB = (after.heapUsed - before.heapUsed + Math.max(0, peakBuffers)) / MIB;
    await settle();
    out.gcInAlloc = gcs > 0;
  } else {
    writeFileSync('/proc/self/clear_refs', '5');
    const rssBefore = statusKiB('VmRSS');
    let outcome = '';
    out.coldMs = cpuMs(() => (outcome = outcomeOf(() => read(chunks))));
    out.peakMB = (statusKiB('VmHWM') - rssBefore) / 1024;
    out.outcome = outcome;
    const warm: number[] = [];
    for (let r = 0; r < 5; r++) warm.push(cpuMs(() => outcomeOf(() => read(chunks))));
    out.warmMs = median(warm);
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

/** A figure of /proc/self/status, in KiB. */
function statusKiB(field: string): number {
  const line = readFileSync('/proc/self/status', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${field}:`));
  return Number(line?.split(/\s+/)[1]);
}

const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 10));

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** The children's node binary and the DaemonSet's node flags they run under. */
interface ChildNode {
  node: string;
  flags: string[];
}

function runChild(
  { node, flags: daemonsetFlags }: ChildNode,
  impl: string,
  caseName: string,
  file: string,
  mode: 'cpu' | 'alloc',
): Partial<Measured> {
  const flags = [...(mode === 'cpu' ? daemonsetFlags : ALLOC_FLAGS), '--expose-gc', '--import', 'tsx'];
  const r = spawnSync(node, [...flags, HERE, '--child', impl, caseName, file, mode], {
    encoding: 'utf8',
    maxBuffer: 16 << 20,
  });
  const line = r.stdout.trim().split('\n').pop() ?? '';
  if (r.status !== 0 || !line.startsWith('{')) {
    const why = (r.stderr || r.stdout).trim().split('\n').slice(-3).join(' | ');
    return { outcome: `child failed (${r.signal ?? r.status}): ${why.slice(0, 120)}` };
  }
  return JSON.parse(line) as Partial<Measured>;
}

/** main's json-reduce.ts in a temporary file, or undefined outside a git checkout that has main. */
function mainCopy(): string | undefined {
  try {
    const text = execFileSync('git', ['show', 'main:src/cluster/json-reduce.ts'], { encoding: 'utf8' });
    const file = join(tmpdir(), `json-reduce-main-${process.pid}.ts`);
    writeFileSync(file, text);
    return file;
  } catch {
    return undefined;
  }
}

const load = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const fmt = (n: number | undefined, digits = 1): string => (n === undefined ? '-' : n.toFixed(digits));

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] === '--child') return child(argv[1]!, argv[2]!, argv[3]!, argv[4] as 'cpu' | 'alloc');
  const value = (name: string): string | undefined => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const runs = Number(value('--runs') ?? 3);
  // Loaded here, not at the top: the children measure their own heap and must not load the YAML reader.
  const { agentContainer, hostArgv, nodeCommand } = await import('../test/support/daemonset.js');
  const { agentNode } = await import('../test/support/image-node.js');
  const childNode: ChildNode = { node: agentNode(argv), flags: nodeCommand(hostArgv(agentContainer())).nodeFlags };
  const nodeVersion = execFileSync(childNode.node, ['--version'], { encoding: 'utf8' }).trim();
  const cases = (value('--cases') ?? Object.keys(CASES).join(',')).split(',');
  const impls = new Map<string, string>();
  const mainFile = mainCopy();
  if (mainFile) impls.set('main', mainFile);
  impls.set('src', fileURLToPath(new URL('../src/cluster/json-reduce.ts', import.meta.url)));
  argv.forEach((a, i) => {
    if (a !== '--impl') return;
    const [name, path] = argv[i + 1]!.split('=');
    impls.set(name!, path!);
  });
  impls.set(REFERENCE, REFERENCE);
  const base = impls.has('main') ? 'main' : REFERENCE;
  console.log(`json-reduce bench: ${runs} rounds, node ${nodeVersion}, load ${load()} at start`);
  console.log(`  cpu/peak flags: ${childNode.flags.join(' ')}; alloc flags: ${ALLOC_FLAGS.join(' ')}`);
  try {
    for (const name of cases) printCase(name, measureCase(name, impls, runs, childNode), base);
  } finally {
    if (mainFile) rmSync(mainFile);
  }
}

/** Each reader's figures per round, the readers' order reversed every other round. */
function measureCase(name: string, impls: Map<string, string>, runs: number, child: ChildNode): Results {
  const file = writeCase(name);
  const results: Results = { mib: statSync(file).size / MIB, byReader: new Map([...impls.keys()].map((k) => [k, []])) };
  try {
    for (let round = 0; round < runs; round++) {
      const order = [...impls.keys()];
      if (round % 2) order.reverse();
      for (const impl of order) {
        const cpu = runChild(child, impls.get(impl)!, name, file, 'cpu');
        const alloc = runChild(child, impls.get(impl)!, name, file, 'alloc');
        results.byReader.get(impl)!.push({ ...cpu, allocMB: alloc.allocMB, gcInAlloc: alloc.gcInAlloc });
      }
    }
  } finally {
    rmSync(file);
  }
  return results;
}

interface Results {
  mib: number;
  byReader: Map<string, Partial<Measured>[]>;
}

type Figure = 'coldMs' | 'warmMs' | 'peakMB' | 'allocMB';
const FIGURES: readonly Figure[] = ['coldMs', 'warmMs', 'peakMB', 'allocMB'];

function printCase(name: string, results: Results, base: string): void {
  console.log(`\n${name}, ${results.mib.toFixed(1)} MiB (load ${load()})`);
  console.log('  reader        cold ms   warm ms   peak MB  alloc MB   cold/warm/peak/alloc vs base   outcome');
  const med = (reader: string, figure: Figure): number | undefined => {
    const xs = results.byReader.get(reader)!.flatMap((m) => (m[figure] === undefined ? [] : [m[figure]]));
    return xs.length ? median(xs) : undefined;
  };
  for (const [reader, rounds] of results.byReader) {
    const ratios = FIGURES.map((figure) => {
      const b = med(base, figure);
      const v = med(reader, figure);
      return b && v !== undefined ? (v / b).toFixed(2) : '-';
    }).join('/');
    const gc = rounds.some((m) => m.gcInAlloc) ? ' gc' : '';
    const figures = FIGURES.map((figure, i) => fmt(med(reader, figure)).padStart(i ? 9 : 8)).join(' ');
    console.log(
      `  ${reader.padEnd(12)} ${figures}${gc.padEnd(3)} ${ratios.padStart(26)}   ${rounds[0]?.outcome ?? ''}`,
    );
  }
}

await main();
