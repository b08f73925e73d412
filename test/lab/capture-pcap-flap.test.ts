// The pcap fallback across a link flap and an interface deletion, on a real
// kernel. libuv stops watching a socket that reports an error, and an
// AF_PACKET socket reports one (ENETDOWN) when its link goes down: the capture
// must watch again, or from then on only the scrapes' own reads drain the
// ring, which overflows between them. A deleted interface must stop the
// capture with a reason, not crash the agent (a throw from the watcher).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { capture } from '../../src/capture/pcap-capture.js';
import { PcapCounter } from '../../src/capture/pcap-counter.js';
import { isRoot } from '../support/netns.js';
import { CaptureLab, PAYLOAD, PORTS, startAgent, UPLINK, V4 } from './capture-lab.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `count` counted packets in from the peer: pod source to a NodePort (loop_return). */
function sendLoopReturns(lab: CaptureLab, count: number): void {
  lab.send('peer', [
    { proto: 'udp', src: V4.podSrc, dst: V4.nodeIp, port: PORTS.nodePortUdp, count, payload: PAYLOAD },
  ]);
}

const targets = {
  vips: [],
  localPrefixes: [{ cidr: V4.podCidr, bound: false }],
  nodePorts: [{ port: PORTS.nodePortUdp, proto: 'udp' as const }],
};

describe.skipIf(!isRoot)('pcap counters across a link flap and an interface deletion (namespaces cbpf-*)', () => {
  const labs: CaptureLab[] = [];
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0)) await c();
    for (const l of labs.splice(0)) l.destroy();
  });

  it('keeps counting from the event loop after the uplink goes down and up, losing nothing', async () => {
    const lab = new CaptureLab('cbpf');
    labs.push(lab);
    const warnings: string[] = [];
    const log = { warn: (_o: object, msg: string) => warnings.push(msg), info: () => {}, error: () => {} };
    // A small ring: only a reader that the event loop keeps draining takes the rounds below without loss.
    const c = PcapCounter.open({
      ifname: UPLINK,
      netnsPath: lab.nodeNetns,
      pcapBufferSize: 512 << 10,
      logger: log as never,
    });
    closers.push(() => c.close());
    c.setTargets(targets);
    sendLoopReturns(lab, 10);
    await sleep(300);

    lab.node.sh(`ip link set ${UPLINK} down; ip link set ${UPLINK} up; ip route replace default via ${V4.peerIp}`);
    await sleep(300);
    // Rounds of packets with the event loop free in between; together 3x what the ring holds.
    const rounds = 6;
    const perRound = 400; // half of what the ring holds (about 800 of these), so one round never fills it
    for (let i = 0; i < rounds; i++) {
      sendLoopReturns(lab, perRound);
      await sleep(250); // > the 100 ms block timeout
    }
    const r = c.read();
    expect(r.drops).toEqual({ counterMapFull: 0, captureBuffer: 0, interface: 0 });
    expect(r.counters).toEqual([
      expect.objectContaining({
        kind: 'loop_return',
        target: '0.0.0.0',
        port: PORTS.nodePortUdp,
        packets: 10 + rounds * perRound,
      }),
    ]);
    expect(c.stopped).toBeUndefined();
    expect(warnings).toContain('pcap capture socket reported an error (the link went down?); capturing again');
  }, 20_000);

  it('stops with a reason when the uplink is deleted: the agent keeps running and keeps what it counted', async () => {
    const lab = new CaptureLab('cbpf');
    labs.push(lab);
    const agent = await startAgent(lab, 'auto', { caps: ['net_raw'] });
    closers.push(() => agent.kill());
    expect(agent.hello.backend).toBe('pcap');
    const dir = mkdtempSync(join(tmpdir(), 'cbpf-evidence-'));
    closers.push(() => rmSync(dir, { recursive: true, force: true }));
    const evidence = capture('udp', {
      ifname: UPLINK,
      netnsPath: lab.nodeNetns,
      file: join(dir, 'e.pcap'),
      durationS: 8,
      maxBytes: 1 << 20,
    });
    await sleep(200);
    sendLoopReturns(lab, 7);
    await sleep(300);
    const before = (await agent.read()).counters.find((x) => x.kind === 'loop_return' && x.port === PORTS.nodePortUdp);
    expect(before?.packets).toBe(7);

    const t0 = Date.now();
    lab.node.sh(`ip link del ${UPLINK}`);
    const ev = await evidence;
    expect(Date.now() - t0).toBeLessThan(3000); // not the 8 s it was asked for
    expect(ev).toMatchObject({ stoppedBy: 'error', packets: 7, error: expect.stringMatching(/interface disappeared/) });
    await sleep(300);
    const after = (await agent.read()) as Awaited<ReturnType<typeof agent.read>> & { stopped?: string };
    expect(after.stopped).toMatch(
      new RegExp(
        `^pcap capture on ${UPLINK} \\((ingress|egress)\\) stopped: pcap: The interface disappeared; \\1 packets are not counted since$`,
      ),
    );
    expect(after.counters.find((x) => x.kind === 'loop_return' && x.port === PORTS.nodePortUdp)?.packets).toBe(7);
  }, 20_000);
});
