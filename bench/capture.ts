// Capture benchmark (not a test): two namespaces cbe-b* joined by a veth, a
// UDP generator (bench/capture-blast.c) in one of them, our counters on the
// node's end. Prints: packets per second with and without the eBPF program
// (matching and non-matching traffic, egress and ingress), kernel ns per
// packet (kernel.bpf_stats_enabled, set for the run and restored), agent CPU
// while reading the counters every second, read time at 16k counter keys, and
// the pcap fallback's loss at increasing rates.
//   sudo node --import tsx bench/capture.ts
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { captureAddon } from '../src/capture/addon.js';
import { EbpfCounter } from '../src/capture/ebpf.js';
import { PcapCounter } from '../src/capture/pcap-counter.js';
import type { Counter } from '../src/capture/counter.js';
import type { CounterKind, Targets } from '../src/capture/targets.js';
import { projectRoot } from '../src/native.js';

const NODE = `cbe-bn${process.pid % 100000}`;
const PEER = `cbe-bp${process.pid % 100000}`;
const IF = 'cbe0';
const A = { node: '10.78.0.1', peer: '10.78.0.2', vip: '10.78.9.9', podSrc: '10.245.1.5', bound: '10.78.5.5' };
const NODEPORT = 30080;
const PAYLOAD = 18; // 60-byte frames: the packet rate is what costs
const SECONDS = 3;

const targets: Targets = {
  vips: [{ address: A.vip, port: 80, proto: 'udp' }],
  localPrefixes: [
    { cidr: A.node, bound: true },
    { cidr: A.bound, bound: true },
    { cidr: '10.245.1.0/24', bound: false },
  ],
  nodePorts: [{ port: NODEPORT, proto: 'udp' }],
};

function ns(name: string, ...cmd: string[]): string {
  return execFileSync('ip', ['netns', 'exec', name, ...cmd], { encoding: 'utf8' });
}

function setUp(): void {
  execFileSync('ip', ['netns', 'add', NODE]);
  execFileSync('ip', ['netns', 'add', PEER]);
  execFileSync('ip', ['link', 'add', 'cbebtmp0', 'netns', NODE, 'type', 'veth', 'peer', 'cbebtmp1', 'netns', PEER]);
  const script = (lines: string[]) => lines.join(' && ');
  ns(NODE, 'sh', '-c', script([
    'ip link set lo up', `ip link set cbebtmp0 name ${IF}`, `ip link set ${IF} up`,
    `ip addr add ${A.node}/24 dev ${IF}`, `ip route add default via ${A.peer}`,
  ]));
  ns(PEER, 'sh', '-c', script([
    'ip link set lo up', `ip link set cbebtmp1 name ${IF}`, `ip link set ${IF} up`,
    `ip addr add ${A.peer}/24 dev ${IF}`, `ip addr add ${A.vip}/32 dev lo`,
    `ip addr add ${A.podSrc}/32 dev lo`, `ip addr add ${A.bound}/32 dev lo`,
  ]));
  // Static neighbours: no ARP in the middle of a measurement.
  const mac = (n: string) => ns(n, 'cat', `/sys/class/net/${IF}/address`).trim();
  ns(NODE, 'ip', 'neigh', 'replace', A.peer, 'lladdr', mac(PEER), 'dev', IF, 'nud', 'permanent');
  ns(PEER, 'ip', 'neigh', 'replace', A.node, 'lladdr', mac(NODE), 'dev', IF, 'nud', 'permanent');
}

function tearDown(): void {
  spawnSync('ip', ['netns', 'delete', NODE]);
  spawnSync('ip', ['netns', 'delete', PEER]);
}

function rxPackets(where: string): number {
  return Number(ns(where, 'cat', `/sys/class/net/${IF}/statistics/rx_packets`));
}

let blastBin = '';
function buildBlaster(dir: string): void {
  blastBin = join(dir, 'capture-blast');
  execFileSync('cc', ['-O2', '-o', blastBin, join(projectRoot(), 'bench', 'capture-blast.c')]);
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
  const args = [b.src, b.dst, String(b.port), String(b.ports ?? 1), String(b.pps ?? 0), String(b.seconds ?? SECONDS), String(PAYLOAD)];
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
  return c.read().counters.filter((s) => s.kind === kind).reduce((n, s) => n + s.packets, 0);
}

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

async function ebpfPhases(): Promise<void> {
  const addon = captureAddon();
  const cases: { name: string; b: Blast; kind: CounterKind; match: boolean }[] = [
    { name: 'egress, matching (local -> VIP:80)', b: { from: NODE, src: A.node, dst: A.vip, port: 80 }, kind: 'to_lb', match: true },
    { name: 'egress, non-matching (-> VIP:81)', b: { from: NODE, src: A.node, dst: A.vip, port: 81 }, kind: 'to_lb', match: false },
    { name: 'ingress, matching (pod src -> NodePort)', b: { from: PEER, src: A.podSrc, dst: A.node, port: NODEPORT }, kind: 'loop_return', match: true },
    { name: 'ingress, non-matching (remote src)', b: { from: PEER, src: A.peer, dst: A.node, port: NODEPORT }, kind: 'loop_return', match: false },
  ];
  console.log('\n== eBPF path (TCX), UDP 60-byte frames, %d s per run', SECONDS);
  console.log('case | pps without program | pps with program | ns/packet (program) | counted / delivered | agent CPU (read every 1 s)');
  for (const cs of cases) {
    const receiver = cs.b.from === NODE ? PEER : NODE;
    let rx0 = rxPackets(receiver);
    await blast(cs.b);
    const bare = (rxPackets(receiver) - rx0) / SECONDS;

    const c = EbpfCounter.open({ ifname: IF, netnsPath: `/var/run/netns/${NODE}`, attach: 'tcx' });
    try {
      c.setTargets(targets);
      const prog = cs.b.from === NODE ? c.programFds().egress : c.programFds().ingress;
      const i0 = addon.bpfProgInfo(prog);
      rx0 = rxPackets(receiver);
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      await blast(cs.b, () => c.read());
      const wallUs = (performance.now() - t0) * 1000;
      const cpu = process.cpuUsage(cpu0);
      const delivered = rxPackets(receiver) - rx0;
      const i1 = addon.bpfProgInfo(prog);
      const runs = Number(i1.runCount - i0.runCount);
      const nsPerPkt = runs ? Number(i1.runTimeNs - i0.runTimeNs) / runs : NaN;
      const n = counted(c, cs.kind);
      console.log(
        `${cs.name} | ${fmt(bare)} | ${fmt(delivered / SECONDS)} | ${fmt(nsPerPkt, 1)} | ${cs.match ? `${fmt(n)} / ${fmt(delivered)}` : `${n} (expected 0)`} | ${fmt((100 * (cpu.user + cpu.system)) / wallUs, 2)} %`,
      );
    } finally {
      c.close();
    }
  }
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
    console.log(`\n== counters read: ${fmt(keys)} keys, median ${fmt(times[10]!, 2)} ms, max ${fmt(times[19]!, 2)} ms (20 reads)`);
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
    buildBlaster(dir);
    setUp();
    writeFileSync(statsPath, '1');
    console.log(`capture benchmark: kernel ${execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim()}, ${captureAddon().bpfPossibleCpus()} CPUs`);
    await ebpfPhases();
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
