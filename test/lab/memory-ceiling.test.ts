// The shipped agent at 5,000 LB Services: an RSS ceiling (generous: bench/agent.ts holds the
// targets, this catches a change that breaks them by far) and the series budget of an idle node
// (docs/metrics.md). The agent runs as the DaemonSet runs it (image Node, node flags, env, bundle),
// with eBPF counters on a veth uplink and 100k conntrack entries of which 1,000 go to 50 VIPs.
// Namespaces are cbc-*.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BENCH_NODE, syntheticCluster } from '../../bench/agent-cluster.js';
import { type Destination, fill, raiseConntrackMax } from '../../bench/conntrack-dump.js';
import { Netns, vethPair } from '../../src/demo/netns.js';
import { parseSamples, type Sample } from '../../src/export/parse-samples.js';
import { isRoot } from '../support/netns.js';
import { shippedAgent } from '../support/shipped-agent.js';
import { freePort, until } from '../support/wait.js';

const SERVICES = 5000;
const ENTRIES = 100_000;
const VIP_ENTRIES = 1000;
const ACTIVE_VIPS = 50;
/** MB; bench/agent.ts's targets are 80 after scrapes and events and 85 at the peak (1M entries). */
const CEILING = { rssMB: 110, peakMB: 140 };
/** docs/metrics.md: an idle node at 5,000 LB Services. */
const IDLE_SAMPLES = 300;

function memoryMB(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1]);
  return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
}

describe.skipIf(!isRoot)('the shipped agent at 5,000 LB Services: memory ceiling and series budget', () => {
  const cleanups: (() => void)[] = [];
  let agent: ChildProcess | undefined;
  let stderr = '';
  let metricsUrl = '';
  const scrape = async (): Promise<Sample[]> => parseSamples(await (await fetch(metricsUrl)).text());

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cbc-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const node = Netns.create('cbc-node');
    cleanups.push(() => node.delete());
    const peer = Netns.create('cbc-peer');
    cleanups.push(() => peer.delete());
    vethPair(node, 'eth0', peer, 'eth0');
    node.sh(`ip addr add ${BENCH_NODE.ip}/24 dev eth0 && ip route add default via ${BENCH_NODE.peerIp}`);
    peer.sh(`ip addr add ${BENCH_NODE.peerIp}/24 dev eth0`);
    const cluster = syntheticCluster(SERVICES, 4 * SERVICES);
    writeFileSync(join(dir, 'cluster.json'), JSON.stringify(cluster.list));
    cleanups.push(raiseConntrackMax(ENTRIES + 10_000));
    const vips = cluster.tcpVipPorts.slice(0, ACTIVE_VIPS);
    const toVip: Destination = (i) => ({
      dst: Buffer.from(vips[i % vips.length]!.vip.split('.').map(Number)),
      dport: vips[i % vips.length]!.port,
    });
    const unrelated = ENTRIES - VIP_ENTRIES;
    fill(node.path, ENTRIES, (i) => (i < unrelated ? { dst: Buffer.from([10, 200, 0, 1]), dport: 80 } : toVip(i)));
    const port = await freePort();
    metricsUrl = `http://127.0.0.1:${port}/metrics`;
    const shipped = shippedAgent(
      [
        '--cluster-file',
        join(dir, 'cluster.json'),
        '--node-name',
        BENCH_NODE.name,
        '--netns',
        node.name,
        '--interface',
        'eth0',
        '--capture',
        'ebpf',
        '--listen',
        `127.0.0.1:${port}`,
        '--evidence-socket',
        join(dir, 'ev.sock'),
      ],
      BENCH_NODE.name,
    );
    agent = spawn(shipped.node, shipped.argv, { env: shipped.env, stdio: ['ignore', 'ignore', 'pipe'] });
    agent.stderr!.on('data', (b: Buffer) => (stderr += b));
    cleanups.push(() => agent?.kill('SIGKILL'));
    await until(
      '/readyz',
      90_000,
      async () =>
        (await fetch(metricsUrl.replace('/metrics', '/readyz')).catch(() => undefined))?.ok ? true : undefined,
      250,
    );
  }, 180_000);

  afterAll(() => {
    for (const undo of cleanups.reverse()) undo();
  });

  it('sends the series of the 50 Service ports its pods call, and a constant for the other 4,950', async () => {
    const s = await scrape();
    const followed = s.find((x) => x.name === 'clbprobe_service_ports_followed')?.value;
    expect(followed, stderr.slice(-2000)).toBeGreaterThanOrEqual(SERVICES);
    const ports = new Set(
      s.filter((x) => x.labels.service).map((x) => `${x.labels.namespace}/${x.labels.service}:${x.labels.port}`),
    );
    expect(ports.size).toBe(ACTIVE_VIPS);
    const perService = s.filter((x) => x.labels.service).length;
    const constant = s.length - perService;
    console.log(`series budget: ${constant} node-level samples, ${perService} for ${ports.size} active Service ports`);
    expect(constant, 'the samples of an idle node').toBeLessThanOrEqual(IDLE_SAMPLES);
    expect(perService / ACTIVE_VIPS).toBeLessThanOrEqual(9);
  });

  it(`stays under ${CEILING.rssMB} MB RSS after scrapes, and under ${CEILING.peakMB} MB at its peak`, async () => {
    for (let i = 0; i < 10; i++) await scrape();
    await new Promise((r) => setTimeout(r, 2000));
    const m = memoryMB(agent!.pid!);
    console.log(`memory ceiling: VmRSS ${m.rss.toFixed(1)} MB, VmHWM ${m.hwm.toFixed(1)} MB`);
    expect(m.rss, `VmRSS ${m.rss.toFixed(1)} MB`).toBeLessThan(CEILING.rssMB);
    expect(m.hwm, `VmHWM ${m.hwm.toFixed(1)} MB`).toBeLessThan(CEILING.peakMB);
  });
});
