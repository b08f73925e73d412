// pcap fallback on a real kernel: the same exact counts as the eBPF path at a
// low rate, filters rebuilt on target changes, and evidence files that
// tcpdump reads back with the expected packets.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Counter } from '../../src/capture/counter.js';
import { capture } from '../../src/capture/pcap-capture.js';
import { PcapCounter } from '../../src/capture/pcap-counter.js';
import { isRoot } from '../support/netns.js';
import { expectCounters, merge, settledReading } from './capture-expect.js';
import { CaptureLab, labTargets, PAYLOAD, PORTS, sendScenario, startAgent, UPLINK, V4, V6 } from './capture-lab.js';

function tcpdumpRead(file: string, filter = ''): string[] {
  const r = spawnSync('tcpdump', ['-nn', '-r', file, ...(filter ? [filter] : [])], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tcpdump -r ${file}: ${r.stderr}`);
  return r.stdout.split('\n').filter(Boolean);
}

describe.skipIf(!isRoot)('pcap counters and evidence (real kernel, namespaces cbe-*)', () => {
  let lab: CaptureLab;
  let dir: string;
  const open: Counter[] = [];

  beforeAll(() => {
    lab = new CaptureLab();
    dir = mkdtempSync(join(tmpdir(), 'cbe-pcap-'));
  });
  afterEach(() => {
    for (const c of open.splice(0)) c.close();
  });
  afterAll(() => {
    lab?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('counts exactly what was sent, like the eBPF path (v4 + v6, tcp + udp)', async () => {
    const c = PcapCounter.open({ ifname: UPLINK, netnsPath: lab.nodeNetns });
    open.push(c);
    c.setTargets(labTargets());
    const want = merge(sendScenario(lab, V4), sendScenario(lab, V6));
    const r = await settledReading(c, want);
    expectCounters(r, want);
    expect(r.drops).toEqual({ counterMapFull: 0, captureBuffer: 0, interface: 0 });
  });

  it('rebuilds its filters when the targets change', async () => {
    const c = PcapCounter.open({ ifname: UPLINK, netnsPath: lab.nodeNetns });
    open.push(c);
    c.setTargets(labTargets([V4]));
    const first = sendScenario(lab, V4);
    await settledReading(c, first);
    const t = labTargets([V4]);
    t.vips = t.vips.map((v) => (v.proto === 'udp' ? { ...v, port: PORTS.vipOtherUdp } : v));
    t.nodePorts = [];
    c.setTargets(t);
    const second = sendScenario(lab, V4)
      .filter((e) => !(e.kind === 'loop_return' && e.target === '0.0.0.0'))
      .map((e) =>
        e.kind === 'to_lb' && e.proto === 'udp'
          ? { ...e, port: PORTS.vipOtherUdp, packets: 4, bytes: 4 * (V4.udpOverhead + PAYLOAD) }
          : e,
      );
    const want = merge(first, second);
    expectCounters(await settledReading(c, want), want);
  });

  it('is what auto falls back to without CAP_BPF, with the reason logged, and counts the same', async () => {
    const agent = await startAgent(lab, 'auto', { caps: ['net_raw'] });
    try {
      expect(agent.hello).toMatchObject({ backend: 'pcap', description: `pcap on ${UPLINK}` });
      expect(agent.hello.warnings).toHaveLength(1);
      expect(agent.hello.warnings[0]).toMatch(/eBPF counters unavailable.*missing capability: CAP_BPF .*CAP_NET_ADMIN/);
      // The capture source is up but says it is degraded, and why (its status reason).
      expect(agent.hello.fallbackReason).toMatch(/^counting with pcap .*eBPF unavailable: .*CAP_BPF/);
      const want = sendScenario(lab, V4);
      await new Promise((r) => setTimeout(r, 400)); // > the 100 ms block timeout
      expectCounters(await agent.read(), want);
    } finally {
      await agent.kill();
    }
  });

  it('names both missing capabilities when neither backend can run', async () => {
    const agent = await startAgent(lab, 'auto', { caps: [] });
    await agent.kill();
    expect(agent.hello.backend).toBeUndefined();
    expect(agent.hello.error).toMatch(
      /no counter backend can run: eBPF: .*missing capability: CAP_BPF .*CAP_NET_ADMIN.*; pcap: .*CAP_NET_RAW/,
    );
  });

  it('writes an evidence .pcap that tcpdump reads, with exactly the matching packets', async () => {
    const file = join(dir, 'evidence.pcap');
    const filter = `udp and dst host ${V4.vip} and dst port ${PORTS.vipUdp}`;
    const running = capture(filter, {
      ifname: UPLINK,
      netnsPath: lab.nodeNetns,
      file,
      durationS: 2,
      maxBytes: 1 << 20,
    });
    await new Promise((r) => setTimeout(r, 200));
    sendScenario(lab, V4);
    const res = await running;
    expect(res).toMatchObject({ file, packets: 5, stoppedBy: 'time', dropped: 0 });
    expect(statSync(file).size).toBe(res.bytes);
    expect(res.bytes).toBe(24 + 5 * (16 + V4.udpOverhead + PAYLOAD));
    const lines = tcpdumpRead(file);
    expect(lines).toHaveLength(5);
    for (const l of lines) expect(l).toContain(`${V4.nodeIp}.`);
    for (const l of lines) expect(l).toContain(`> ${V4.vip}.${PORTS.vipUdp}: UDP, length ${PAYLOAD}`);
  });

  it('stops at maxBytes without writing a partial packet', async () => {
    const file = join(dir, 'bounded.pcap');
    const record = 16 + V6.udpOverhead + PAYLOAD;
    const maxBytes = 24 + 3 * record + record - 1; // room for 3 whole packets, not 4
    const running = capture(`udp and dst host ${V6.vip}`, {
      ifname: UPLINK,
      netnsPath: lab.nodeNetns,
      file,
      durationS: 10,
      maxBytes,
    });
    await new Promise((r) => setTimeout(r, 200));
    const t0 = Date.now();
    sendScenario(lab, V6);
    const res = await running;
    expect(Date.now() - t0).toBeLessThan(8000);
    // 5 to VIP:80 and 4 to VIP:81 matched; 3 fit.
    expect(res).toMatchObject({ packets: 3, stoppedBy: 'size', bytes: 24 + 3 * record });
    expect(res.dropped).toBeGreaterThanOrEqual(1);
    expect(statSync(file).size).toBe(res.bytes);
    expect(tcpdumpRead(file, 'ip6')).toHaveLength(3);
  });

  it('names the capability when the interface cannot be opened', async () => {
    await expect(
      capture('udp', {
        ifname: 'cbe-nope',
        netnsPath: lab.nodeNetns,
        file: join(dir, 'x.pcap'),
        durationS: 1,
        maxBytes: 1000,
      }),
    ).rejects.toThrow(/evidence capture on cbe-nope|capturing on cbe-nope/);
  });
});
