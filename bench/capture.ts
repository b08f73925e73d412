// Capture benchmark (not a test): two namespaces cbe-b* joined by a veth, a
// UDP generator (bench/capture-blast.c) in one of them, our counters on the
// node's end. For every case (IPv4 and IPv6; egress and ingress; matching and
// non-matching traffic) it alternates, ROUNDS times, an empty tc program
// (bench/empty.bpf.c) and ours on the same hook of the same veth with the same
// traffic, and prints: kernel ns per packet of each (kernel.bpf_stats_enabled,
// set for the run and restored) and their ratio against the targets, packets
// per second, packets counted against packets delivered (loss), agent CPU while
// reading the counters every second; then the read time at 16k counter keys,
// and the pcap fallback's loss at increasing rates. The host's load average is
// printed with every case: the figures mean little on a busy machine.
//   sudo node --import tsx bench/capture.ts [--rounds N] [--seconds S] [--only ebpf] [--case TEXT]
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Counter } from '../src/capture/counter.js';
import { EbpfCounter } from '../src/capture/ebpf.js';
import { PcapCounter } from '../src/capture/pcap-counter.js';
import type { CounterKind, Targets } from '../src/capture/targets.js';
import { projectRoot } from '../src/native/addon.js';
import { native } from '../src/native/index.js';

const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] ? process.argv[i + 1]! : dflt;
};
const PREFIX = process.env.CLBPROBE_BENCH_NETNS ?? 'cbe-b';
const NODE = `${PREFIX}n${process.pid % 100000}`;
const PEER = `${PREFIX}p${process.pid % 100000}`;
const IF = 'cbe0';
const A = { node: '10.78.0.1', peer: '10.78.0.2', vip: '10.78.9.9', podSrc: '10.245.1.5', bound: '10.78.5.5' };
const A6 = { node: 'fd78::1', peer: 'fd78::2', vip: 'fd78:9::9', podSrc: 'fd45:1::5', bound: 'fd78:5::5' };
const NODEPORT = 30080;
const PAYLOAD = 18; // 60-byte IPv4 frames: the packet rate is what costs
const SECONDS = Number(arg('seconds', '2'));
const ROUNDS = Number(arg('rounds', '3'));
/** Targets of issue 20: ours at most this many times the empty program. */
const TARGET_RATIO = { match: 1.8, miss: 1.3 };

// A node-like target set: a few hundred VIPs and bound addresses, not just the ones the traffic hits.
const targets: Targets = {
  vips: [
    { address: A.vip, port: 80, proto: 'udp' },
    { address: A6.vip, port: 80, proto: 'udp' },
    ...Array.from({ length: 250 }, (_, i) => ({
      address: `10.79.${i >> 8}.${i & 255}`,
      port: 443,
      proto: 'tcp' as const,
    })),
    ...Array.from({ length: 250 }, (_, i) => ({
      address: `fd79::${i.toString(16)}`,
      port: 443,
      proto: 'tcp' as const,
    })),
  ],
  localPrefixes: [
    { cidr: A.node, bound: true },
    { cidr: A.bound, bound: true },
    { cidr: '10.245.1.0/24', bound: false },
    { cidr: A6.node, bound: true },
    { cidr: A6.bound, bound: true },
    { cidr: 'fd45:1::/64', bound: false },
    ...Array.from({ length: 250 }, (_, i) => ({ cidr: `10.80.${i >> 8}.${i & 255}`, bound: true })),
  ],
  nodePorts: [{ port: NODEPORT, proto: 'udp' }],
};

const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

function ns(name: string, ...cmd: string[]): string {
  return execFileSync('ip', ['netns', 'exec', name, ...cmd], { encoding: 'utf8' });
}

function setUp(): void {
  execFileSync('ip', ['netns', 'add', NODE]);
  execFileSync('ip', ['netns', 'add', PEER]);
  execFileSync('ip', ['link', 'add', 'cbebtmp0', 'netns', NODE, 'type', 'veth', 'peer', 'cbebtmp1', 'netns', PEER]);
  const script = (lines: string[]) => lines.join(' && ');
  ns(
    NODE,
    'sh',
    '-c',
    script([
      'ip link set lo up',
      `ip link set cbebtmp0 name ${IF}`,
      `ip link set ${IF} up`,
      `ip addr add ${A.node}/24 dev ${IF}`,
      `ip route add default via ${A.peer}`,
      `ip addr add ${A6.node}/64 dev ${IF} nodad`,
      `ip -6 route add default via ${A6.peer}`,
    ]),
  );
  ns(
    PEER,
    'sh',
    '-c',
    script([
      'ip link set lo up',
      `ip link set cbebtmp1 name ${IF}`,
      `ip link set ${IF} up`,
      `ip addr add ${A.peer}/24 dev ${IF}`,
      `ip addr add ${A.vip}/32 dev lo`,
      `ip addr add ${A.podSrc}/32 dev lo`,
      `ip addr add ${A.bound}/32 dev lo`,
      `ip addr add ${A6.peer}/64 dev ${IF} nodad`,
      `ip addr add ${A6.vip}/128 dev lo nodad`,
      `ip addr add ${A6.podSrc}/128 dev lo nodad`,
      `ip addr add ${A6.bound}/128 dev lo nodad`,
    ]),
  );
  // Static neighbours: no ARP in the middle of a measurement.
  const mac = (n: string) => ns(n, 'cat', `/sys/class/net/${IF}/address`).trim();
  ns(NODE, 'ip', 'neigh', 'replace', A.peer, 'lladdr', mac(PEER), 'dev', IF, 'nud', 'permanent');
  ns(PEER, 'ip', 'neigh', 'replace', A.node, 'lladdr', mac(NODE), 'dev', IF, 'nud', 'permanent');
  ns(NODE, 'ip', '-6', 'neigh', 'replace', A6.peer, 'lladdr', mac(PEER), 'dev', IF, 'nud', 'permanent');
  ns(PEER, 'ip', '-6', 'neigh', 'replace', A6.node, 'lladdr', mac(NODE), 'dev', IF, 'nud', 'permanent');
}

function tearDown(): void {
  spawnSync('ip', ['netns', 'delete', NODE]);
  spawnSync('ip', ['netns', 'delete', PEER]);
}

/**
 * Our datagrams that reached the receiving stack: nothing listens on the ports
 * the generator aims at, so each one bumps UDP NoPorts (IPv4 or IPv6), and
 * stray packets (neighbour discovery, ICMP errors) do not.
 */
function udpDelivered(where: string): number {
  const text = ns(where, 'cat', '/proc/net/snmp', '/proc/net/snmp6');
  const udp = text.split('\n').filter((l) => l.startsWith('Udp:'));
  const names = udp[0]!.trim().split(/\s+/);
  const v4 = Number(udp[1]!.trim().split(/\s+/)[names.indexOf('NoPorts')]);
  const v6 = Number(/^Udp6NoPorts\s+(\d+)/m.exec(text)?.[1]);
  if (!Number.isFinite(v4) || !Number.isFinite(v6)) throw new Error(`no UDP NoPorts counters in ${where}`);
  return v4 + v6;
}

function rxPackets(where: string): number {
  return Number(ns(where, 'cat', `/sys/class/net/${IF}/statistics/rx_packets`));
}

let blastBin = '';
let emptyObj = '';
function buildTools(dir: string): void {
  blastBin = join(dir, 'capture-blast');
  execFileSync('cc', ['-O2', '-o', blastBin, join(projectRoot(), 'bench', 'capture-blast.c')]);
  emptyObj = join(dir, 'empty.bpf.o');
  const arch = execFileSync('uname', ['-m'], { encoding: 'utf8' }).trim();
  execFileSync('clang', [
    '-O2',
    '-g',
    '-target',
    'bpf',
    `-I/usr/include/${arch}-linux-gnu`,
    '-c',
    join(projectRoot(), 'bench', 'empty.bpf.c'),
    '-o',
    emptyObj,
  ]);
}

interface Blast {
  from: string;
  src: string;
  dst: string;
  port: number;
  ports?: number;
  pps?: number;
  seconds?: number;
}

/** Runs the generator; `during` is called every second meanwhile. Returns packets sent. */
async function blast(b: Blast, during?: () => void): Promise<number> {
  const args = [
    b.src,
    b.dst,
    String(b.port),
    String(b.ports ?? 1),
    String(b.pps ?? 0),
    String(b.seconds ?? SECONDS),
    String(PAYLOAD),
  ];
  const child = spawn('ip', ['netns', 'exec', b.from, blastBin, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const timer = during ? setInterval(during, 1000) : undefined;
  const code = await new Promise<number | null>((r) => child.on('exit', r));
  if (timer) clearInterval(timer);
  if (code !== 0) throw new Error(`blaster exited ${code}`);
  return Number(out.trim());
}

function counted(c: Counter, kind: CounterKind): number {
  return c
    .read()
    .counters.filter((s) => s.kind === kind)
    .reduce((n, s) => n + s.packets, 0);
}

const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

interface Case {
  name: string;
  b: Blast;
  kind: CounterKind;
  match: boolean;
}

function cases(): Case[] {
  const out: Case[] = [];
  for (const [fam, a] of [
    ['v4', A],
    ['v6', A6],
  ] as const) {
    out.push(
      {
        name: `${fam} egress, matching (local -> VIP:80)`,
        b: { from: NODE, src: a.node, dst: a.vip, port: 80 },
        kind: 'to_lb',
        match: true,
      },
      {
        name: `${fam} egress, non-matching (-> VIP:81)`,
        b: { from: NODE, src: a.node, dst: a.vip, port: 81 },
        kind: 'to_lb',
        match: false,
      },
      {
        name: `${fam} egress, non-matching (-> remote)`,
        b: { from: NODE, src: a.node, dst: a.peer, port: 80 },
        kind: 'to_lb',
        match: false,
      },
      {
        name: `${fam} ingress, matching (pod src -> NodePort)`,
        b: { from: PEER, src: a.podSrc, dst: a.node, port: NODEPORT },
        kind: 'loop_return',
        match: true,
      },
      {
        name: `${fam} ingress, non-matching (remote src)`,
        b: { from: PEER, src: a.peer, dst: a.node, port: NODEPORT },
        kind: 'loop_return',
        match: false,
      },
    );
  }
  return out;
}

interface Run {
  ns: number;
  pps: number;
}

/** Kernel ns per run of prog and packets delivered per second while blasting. */
async function measure(prog: number, cs: Case, during?: () => void): Promise<Run & { delivered: number }> {
  const addon = native();
  const receiver = cs.b.from === NODE ? PEER : NODE;
  const i0 = addon.bpfProgInfo(prog);
  const rx0 = udpDelivered(receiver);
  await blast(cs.b, during);
  const delivered = udpDelivered(receiver) - rx0;
  const i1 = addon.bpfProgInfo(prog);
  const runs = Number(i1.runCount - i0.runCount);
  return { ns: runs ? Number(i1.runTimeNs - i0.runTimeNs) / runs : NaN, pps: delivered / SECONDS, delivered };
}

/** The empty program on the case's hook. */
async function emptyRun(cs: Case): Promise<Run> {
  const addon = native();
  const obj = addon.bpfObjectOpen(emptyObj);
  try {
    addon.bpfObjectLoad(obj);
    const prog = addon.bpfObjectProgFd(obj, 'clbp_empty');
    const link = addon.bpfTcxAttach(prog, IF, cs.b.from === NODE, 0, `/var/run/netns/${NODE}`);
    try {
      return await measure(prog, cs);
    } finally {
      addon.bpfLinkDetach(link);
    }
  } finally {
    addon.bpfObjectClose(obj);
  }
}

/** Ours, reading the counters every second as the agent does. */
async function oursRun(cs: Case): Promise<Run & { counted: number; delivered: number; cpu: number }> {
  const c = EbpfCounter.open({ ifname: IF, netnsPath: `/var/run/netns/${NODE}`, attach: 'tcx' });
  try {
    c.setTargets(targets);
    const prog = cs.b.from === NODE ? c.programFds().egress : c.programFds().ingress;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const r = await measure(prog, cs, () => c.read());
    const wallUs = (performance.now() - t0) * 1000;
    const cpu = process.cpuUsage(cpu0);
    return { ...r, counted: counted(c, cs.kind), cpu: (100 * (cpu.user + cpu.system)) / wallUs };
  } finally {
    c.close();
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function ebpfPhases(): Promise<boolean> {
  console.log(
    `\n== eBPF path (TCX), UDP 60/80-byte frames, ${SECONDS} s per run, ${ROUNDS} rounds of (empty program, ours) per case; medians`,
  );
  console.log(
    'case | load avg | ns/pkt empty | ns/pkt ours | ratio (target) | pps empty | pps ours | counted / delivered (loss) | agent CPU',
  );
  let allMet = true;
  const only = arg('case', '');
  for (const cs of cases().filter((c) => c.name.includes(only))) {
    const load0 = load();
    const empty: Run[] = [];
    const ours: Awaited<ReturnType<typeof oursRun>>[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      empty.push(await emptyRun(cs));
      ours.push(await oursRun(cs));
    }
    const e = median(empty.map((x) => x.ns));
    const o = median(ours.map((x) => x.ns));
    const ratio = o / e;
    const target = cs.match ? TARGET_RATIO.match : TARGET_RATIO.miss;
    const counts = ours.reduce((n, x) => n + x.counted, 0);
    const delivered = ours.reduce((n, x) => n + x.delivered, 0);
    const exact = cs.match ? counts === delivered : counts === 0;
    const met = ratio <= target && exact;
    allMet &&= met;
    console.log(
      `${cs.name} | ${load0} | ${fmt(e, 1)} | ${fmt(o, 1)} | ${fmt(ratio, 2)}x (<= ${target}x: ${ratio <= target ? 'met' : 'NOT met'}) | ${fmt(median(empty.map((x) => x.pps)))} | ${fmt(median(ours.map((x) => x.pps)))} | ${
        cs.match ? `${fmt(counts)} / ${fmt(delivered)} (${fmt(delivered - counts)} lost)` : `${counts} (expected 0)`
      } | ${fmt(median(ours.map((x) => x.cpu)), 2)} %`,
    );
  }
  console.log(`eBPF targets ${allMet ? 'met' : 'NOT met'} (load avg now ${load()})`);
  return allMet;
}

async function readAt16k(): Promise<void> {
  const c = EbpfCounter.open({ ifname: IF, netnsPath: `/var/run/netns/${NODE}`, attach: 'tcx' });
  try {
    c.setTargets(targets);
    // Health-check style traffic from a bound address to 16000 ports: one counter key each.
    await blast({ from: PEER, src: A.bound, dst: A.node, port: 40000, ports: 16000, seconds: 1 });
    const keys = c.read().counters.length;
    const times: number[] = [];
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      c.read();
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    console.log(
      `\n== counters read: ${fmt(keys)} keys, median ${fmt(times[10]!, 2)} ms, max ${fmt(times[19]!, 2)} ms (20 reads)`,
    );
  } finally {
    c.close();
  }
}

async function pcapPhases(): Promise<void> {
  console.log('\n== pcap fallback (2 s per rate, 8 MiB buffer per direction, matching ingress traffic)');
  console.log('target pps | achieved pps | sent | delivered | counted | lost | pcap drops | agent CPU');
  for (const pps of [10_000, 50_000, 100_000, 200_000, 0]) {
    const c = PcapCounter.open({ ifname: IF, netnsPath: `/var/run/netns/${NODE}` });
    try {
      c.setTargets(targets);
      const rx0 = rxPackets(NODE);
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      const sent = await blast({ from: PEER, src: A.podSrc, dst: A.node, port: NODEPORT, pps, seconds: 2 });
      await new Promise((r) => setTimeout(r, 300)); // the last block's timeout
      const r = c.read();
      const wallUs = (performance.now() - t0) * 1000;
      const cpu = process.cpuUsage(cpu0);
      const delivered = rxPackets(NODE) - rx0;
      const n = r.counters.filter((s) => s.kind === 'loop_return').reduce((s, x) => s + x.packets, 0);
      console.log(
        `${pps ? fmt(pps) : 'max'} | ${fmt(sent / 2)} | ${fmt(sent)} | ${fmt(delivered)} | ${fmt(n)} | ${fmt(delivered - n)} (${fmt((100 * (delivered - n)) / delivered, 2)} %) | ${fmt(r.drops.captureBuffer)} | ${fmt((100 * (cpu.user + cpu.system)) / wallUs, 1)} %`,
      );
    } finally {
      c.close();
    }
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (namespaces, BPF, packet capture)');
  const statsPath = '/proc/sys/kernel/bpf_stats_enabled';
  const statsBefore = readFileSync(statsPath, 'utf8').trim();
  const dir = mkdtempSync(join(tmpdir(), 'cbe-bench-'));
  const cleanup = () => {
    writeFileSync(statsPath, statsBefore);
    tearDown();
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('SIGINT', () => {
    cleanup();
    process.exit(130);
  });
  try {
    buildTools(dir);
    setUp();
    writeFileSync(statsPath, '1');
    const commit = spawnSync('git', ['-C', projectRoot(), 'rev-parse', '--short', 'HEAD'], {
      encoding: 'utf8',
    }).stdout.trim();
    console.log(
      `capture benchmark at ${commit || '?'}: kernel ${execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim()}, ${native().bpfPossibleCpus()} CPUs, load avg ${load()}`,
    );
    await ebpfPhases();
    if (arg('only', '') === 'ebpf') return;
    await readAt16k();
    await pcapPhases();
  } finally {
    cleanup();
  }
}

main().catch((e: unknown) => {
  console.error(`bench/capture: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
