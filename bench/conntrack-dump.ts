// Benchmark: streaming conntrack dump + decode (ours) against
// `conntrack -L -o extended > /dev/null`, on the same table, same run.
// Fills a network namespace's table with N entries over ctnetlink (batched
// CT_NEW messages), then times both readers and their peak RSS.
//   npm run build && node --import tsx bench/conntrack-dump.ts [--sizes 100000,1000000] [--runs 3]
// Ours runs as deployed: the compiled reader (dist/) under deploy/daemonset.yaml's node flags, on
// the image's Node release (--node image|host|PATH, default image: test/support/image-node.ts).
// Root only. Raises net.netfilter.nf_conntrack_max in the root namespace when
// needed (it cannot be set per namespace) and restores it afterwards.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as C from '../src/kernel/conntrack/constants.js';
import { MessageWriter, NLM_F_CREATE, NLM_F_REQUEST } from '../src/kernel/netlink/codec.js';
import { NETLINK_NETFILTER, NetlinkSocket } from '../src/kernel/netlink/socket.js';
import { native } from '../src/native/index.js';
import { agentContainer, hostArgv, nodeCommand } from '../test/support/daemonset.js';
import { agentNode, nodeVersion } from '../test/support/image-node.js';

const MAX_PATH = '/proc/sys/net/netfilter/nf_conntrack_max';

/** The original destination of entry i (bench/agent points some at LB VIPs); by default 10.200.0.1:80. */
export type Destination = (i: number) => { dst: Buffer; dport: number };
const UNRELATED: Destination = () => ({ dst: Buffer.from([10, 200, 0, 1]), dport: 80 });

/** A CT_NEW message for entry i (an ESTABLISHED TCP flow); unique per i below 2^23 for one destination. */
export function entryMessage(i: number, to: Destination = UNRELATED): Buffer {
  // 10.(i>>16).(i>>8).(i) : 1024 + (i % 60000) -> destination, reply from a "pod".
  const src = Buffer.from([10, 100 + ((i >> 16) & 0x7f), (i >> 8) & 0xff, i & 0xff]);
  const { dst, dport } = to(i);
  const pod = Buffer.from([10, 244, (i >> 8) & 0xff, i & 0xff]);
  const sport = 1024 + (i % 60000);
  const w = new MessageWriter((C.NFNL_SUBSYS_CTNETLINK << 8) | C.IPCTNL_MSG_CT_NEW, NLM_F_REQUEST | NLM_F_CREATE)
    .u8(C.AF_INET)
    .u8(0)
    .u16(0);
  const tuple = (type: number, s: Buffer, d: Buffer, sp: number, dp: number): void => {
    w.beginNested(type).beginNested(C.CTA_TUPLE_IP).attr(C.CTA_IP_V4_SRC, s).attr(C.CTA_IP_V4_DST, d).endNested();
    w.beginNested(C.CTA_TUPLE_PROTO).attrU8(C.CTA_PROTO_NUM, 6).attrU16be(C.CTA_PROTO_SRC_PORT, sp);
    w.attrU16be(C.CTA_PROTO_DST_PORT, dp).endNested().endNested();
  };
  tuple(C.CTA_TUPLE_ORIG, src, dst, sport, dport);
  tuple(C.CTA_TUPLE_REPLY, pod, src, 8080, sport);
  w.attrU32be(C.CTA_STATUS, C.IPS_CONFIRMED | C.IPS_SEEN_REPLY | C.IPS_ASSURED | C.IPS_DST_NAT);
  w.attrU32be(C.CTA_TIMEOUT, 3600);
  w.beginNested(C.CTA_PROTOINFO)
    .beginNested(C.CTA_PROTOINFO_TCP)
    .attrU8(C.CTA_PROTOINFO_TCP_STATE, 3)
    .endNested()
    .endNested();
  return w.finish();
}

/** Inserts n entries, many messages per datagram, without waiting for ACKs. */
export function fill(netns: string, n: number, to?: Destination): void {
  const sock = NetlinkSocket.open(NETLINK_NETFILTER, { netns, rcvbuf: 64 << 20 });
  try {
    let batch: Buffer[] = [];
    let bytes = 0;
    const flush = (): void => {
      if (!batch.length) return;
      native().nlSend(sock.fd, Buffer.concat(batch));
      batch = [];
      bytes = 0;
    };
    for (let i = 0; i < n; i++) {
      const m = entryMessage(i, to);
      batch.push(m);
      bytes += m.length;
      if (bytes > 60_000) flush();
    }
    flush();
  } finally {
    sock.close();
  }
}

/** nf_conntrack_max can only be set from the root namespace: raises it to fit n entries; returns what puts the old value back. */
export function raiseConntrackMax(n: number): () => void {
  const old = readFileSync(MAX_PATH, 'utf8').trim();
  const ours = String(Math.max(Number(old), n + 10_000));
  writeFileSync(MAX_PATH, ours);
  // The limit is machine-wide: put the old value back only while it is still ours. Another bench
  // that raised it since needs it (lowering it under that bench's table makes the kernel refuse
  // every new entry there, ENOMEM, and its events never happen).
  return () => {
    if (readFileSync(MAX_PATH, 'utf8').trim() === ours) writeFileSync(MAX_PATH, old);
  };
}

/** The compiled reader, as the agent ships it (npm run build). */
const DIST_DUMP = new URL('../dist/src/kernel/conntrack/dump.js', import.meta.url).href;

/**
 * The child: dump + decode + summarise with the compiled reader, print figures as JSON. It runs
 * as an ES module text (node -e) so it loads no TypeScript tooling that the agent does not load.
 * Mode "summary" is `snapshot`'s read (readConntrack: every entry decoded and counted, strings
 * made only for entries kept, here none); mode "objects" makes a ConntrackEntry of every entry
 * (dumpConntrack, as `diagnose` and `collect` consume the table).
 */
const CHILD = `
const { SummaryCounter, dumpConntrack, readConntrack } = await import(${JSON.stringify(DIST_DUMP)});
const [netns, mode] = process.argv.slice(1);
const t0 = performance.now();
let entries, total;
if (mode === 'objects') {
  const counter = new SummaryCounter();
  entries = (await dumpConntrack((b) => b.forEach((e) => counter.add(e)), { netns })).entries;
  total = counter.summary.total;
} else {
  const r = await readConntrack({ netns });
  if (!r.summary) throw new Error(r.status.reason);
  entries = total = r.summary.total;
}
const ms = performance.now() - t0;
process.stdout.write(JSON.stringify({ entries, ms, maxRssMB: process.resourceUsage().maxRSS / 1024, total }) + '\\n');
`;

/** deploy/daemonset.yaml's node flags (the agent's command up to its script). */
function deployedNodeFlags(): string[] {
  const argv = hostArgv(agentContainer());
  return nodeCommand(argv).nodeFlags;
}

type Mode = 'summary' | 'objects';

function measureOurs(
  node: string,
  netns: string,
  mode: Mode,
  extraFlags: string[],
): { entries: number; ms: number; wallMs: number; maxRssMB: number } {
  const t0 = performance.now();
  const r = spawnSync(node, [...deployedNodeFlags(), ...extraFlags, '--input-type=module', '-e', CHILD, netns, mode], {
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`ours failed: ${r.stderr}`);
  return {
    ...(JSON.parse(r.stdout) as { entries: number; ms: number; maxRssMB: number }),
    wallMs: performance.now() - t0,
  };
}

function measureConntrack(ns: string): { ms: number; maxRssMB: number } {
  const r = spawnSync(
    '/usr/bin/time',
    ['-f', '%e %M', 'ip', 'netns', 'exec', ns, 'sh', '-c', 'conntrack -L -o extended > /dev/null 2>&1'],
    {
      encoding: 'utf8',
    },
  );
  const last = r.stderr.trim().split('\n').pop() ?? '';
  const [sec, kb] = last.split(' ').map(Number);
  if (r.status !== 0 || sec === undefined || kb === undefined) throw new Error(`conntrack -L failed: ${r.stderr}`);
  return { ms: sec * 1000, maxRssMB: kb / 1024 };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const arg = (name: string, def: string): string => {
    const i = argv.indexOf(name);
    return i >= 0 && argv[i + 1] ? argv[i + 1]! : def;
  };
  const sizes = arg('--sizes', '100000,1000000').split(',').map(Number);
  const runs = Number(arg('--runs', '3'));
  // e.g. --child-flags "--cpu-prof --cpu-prof-dir=/tmp/p" to profile ours.
  const childFlags = arg('--child-flags', '').split(' ').filter(Boolean);
  if (!existsSync(fileURLToPath(DIST_DUMP))) throw new Error('dist/ is missing: npm run build first');
  const node = agentNode(argv);
  const load = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.log(
    `host load (1/5/15 min) at start: ${load()}; ours on node ${nodeVersion(node)} ${deployedNodeFlags().join(' ')}`,
  );
  if (process.getuid?.() !== 0) throw new Error('bench/conntrack-dump needs root (network namespaces, ctnetlink)');

  const ns = `${process.env.CLBPROBE_BENCH_NETNS ?? 'cbl-bench'}${process.pid}`;
  execFileSync('ip', ['netns', 'add', ns]);
  const path = `/var/run/netns/${ns}`;
  const rows: string[] = [];
  let restoreMax = (): void => {};
  try {
    restoreMax = raiseConntrackMax(Math.max(...sizes));
    for (const n of sizes) {
      execFileSync('ip', ['netns', 'exec', ns, 'conntrack', '-F'], { stdio: 'ignore' });
      const tf = performance.now();
      fill(path, n);
      const count = Number(execFileSync('ip', ['netns', 'exec', ns, 'conntrack', '-C'], { encoding: 'utf8' }).trim());
      console.error(`filled ${count} entries in ${((performance.now() - tf) / 1000).toFixed(1)} s`);
      // Interleaved, so that a change in host load falls on all three alike.
      const ours: Record<Mode, ReturnType<typeof measureOurs>[]> = { summary: [], objects: [] };
      const theirs = [];
      for (let r = 0; r < runs; r++) {
        ours.summary.push(measureOurs(node, path, 'summary', childFlags));
        theirs.push(measureConntrack(ns));
        ours.objects.push(measureOurs(node, path, 'objects', childFlags));
      }
      const t = { ms: median(theirs.map((x) => x.ms)), rss: Math.max(...theirs.map((x) => x.maxRssMB)) };
      for (const mode of ['summary', 'objects'] as const) {
        const runsOf = ours[mode];
        const o = {
          ms: median(runsOf.map((x) => x.ms)),
          wall: median(runsOf.map((x) => x.wallMs)),
          rss: Math.max(...runsOf.map((x) => x.maxRssMB)),
        };
        if (runsOf.some((x) => x.entries !== count))
          throw new Error(`ours (${mode}) saw ${runsOf.map((x) => x.entries)} entries, table has ${count}`);
        rows.push(
          `${String(count).padStart(8)}  ours/${mode.padEnd(7)} ${o.ms.toFixed(0).padStart(6)} ms (process ${o.wall.toFixed(0)} ms) peak RSS ${o.rss.toFixed(1).padStart(5)} MB` +
            `   conntrack -L ${t.ms.toFixed(0).padStart(6)} ms ${t.rss.toFixed(1).padStart(5)} MB   ratio ours/conntrack ${(o.ms / t.ms).toFixed(2)}`,
        );
        console.error(rows.at(-1));
      }
    }
  } finally {
    spawnSync('ip', ['netns', 'delete', ns]);
    restoreMax();
  }
  console.log(
    `conntrack dump + decode, median of ${runs} runs; peak RSS: the largest. ours/summary: snapshot's read (every entry decoded` +
      ` and counted, strings only for entries kept); ours/objects: a ConntrackEntry made of every entry. Time inside the process` +
      ` (process: incl. node start-up). Host load at end: ${load()}`,
  );
  for (const r of rows) console.log(r);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((e: unknown) => {
    console.error(`bench/conntrack-dump: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  });
}
