// eBPF counters when the uplink is deleted, and deleted and re-created (a
// driver reload: same name and addresses, new ifindex), on a real kernel. The
// programs die with the interface while the maps, read by fd, keep answering
// the old counts: without a check the counters went on "up" and counting
// nothing (and a read while no interface had the name threw ENODEV).
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TC_HANDLE, TC_PRIORITY } from '../../src/capture/attach.js';
import { EbpfCounter } from '../../src/capture/ebpf.js';
import type { CounterReading } from '../../src/capture/targets.js';
import { bpfAddon } from '../../src/native/bpf.js';
import { isRoot } from '../support/netns.js';
import { type Agent, CaptureLab, PAYLOAD, PORTS, startAgent, UPLINK, V4 } from './capture-lab.js';

const targets = {
  vips: [],
  localPrefixes: [{ cidr: V4.podCidr, bound: false }],
  nodePorts: [{ port: PORTS.nodePortUdp, proto: 'udp' as const }],
};

/** `count` counted packets in from the peer: pod source to a NodePort (loop_return). */
function sendLoopReturns(lab: CaptureLab, count: number): void {
  lab.send('peer', [
    { proto: 'udp', src: V4.podSrc, dst: V4.nodeIp, port: PORTS.nodePortUdp, count, payload: PAYLOAD },
  ]);
}

const counted = (r: CounterReading) =>
  r.counters.find((c) => c.kind === 'loop_return' && c.port === PORTS.nodePortUdp)?.packets ?? 0;

/** Our programs on the node's uplink: TCX program ids on both hooks and our cls_bpf filters. */
function attached(lab: CaptureLab): { tcx: number; tc: number } {
  const a = bpfAddon();
  const ns = lab.nodeNetns;
  return {
    tcx: [false, true].flatMap((eg) => a.bpfTcxQuery(UPLINK, eg, ns)).length,
    tc: [false, true].map((eg) => a.bpfTcQuery(UPLINK, eg, TC_HANDLE, TC_PRIORITY, ns)).filter((id) => id !== 0).length,
  };
}

const stoppedText = (ifindex: number) =>
  `eBPF counters on ${UPLINK} stopped: the interface was deleted (ifindex ${ifindex}); packets are not counted since`;

describe.skipIf(!isRoot)('eBPF counters when the uplink is deleted or re-created (namespaces cbeg-*)', () => {
  // One lab for all: each test leaves the uplink re-created, and afterEach re-creates it after a failure.
  let lab: CaptureLab;
  const closers: (() => unknown)[] = [];
  beforeAll(() => {
    lab = new CaptureLab('cbeg');
  });
  afterEach(async () => {
    for (const c of closers.splice(0)) await c();
    if (lab && lab.node.run('ip', '-o', 'link', 'show').indexOf(`${UPLINK}@`) < 0) lab.wireUplink();
  });
  afterAll(() => lab?.destroy());

  for (const mode of ['tcx', 'tc'] as const) {
    it(`say they stopped while the uplink is gone and count again on the re-created one (${mode})`, () => {
      const logged: string[] = [];
      const log = {
        warn: (_o: object, m: string) => logged.push(m),
        error: (_o: object, m: string) => logged.push(m),
        info: () => {},
      };
      const c = EbpfCounter.open({ ifname: UPLINK, netnsPath: lab.nodeNetns, attach: mode, logger: log as never });
      closers.push(() => c.close());
      c.setTargets(targets);
      sendLoopReturns(lab, 5);
      const first = c.read();
      expect(counted(first)).toBe(5);
      expect(c.stopped).toBeUndefined();

      const oldIndex = lab.uplinkIndex();
      lab.deleteUplink();
      const gone = c.read(); // the old code threw "rtnetlink: link cbe0: ENODEV" here
      expect(c.stopped).toBe(stoppedText(oldIndex));
      expect(counted(gone)).toBe(5);
      expect(gone.seen).toEqual(first.seen);
      expect(c.read().seen).toEqual(first.seen);

      lab.wireUplink(); // sends 2 packets each way to resolve neighbours
      expect(lab.uplinkIndex()).not.toBe(oldIndex);
      sendLoopReturns(lab, 7);
      const back = c.read(); // the old code: still 5, and `seen` from the new interface's counters
      expect(c.stopped).toBeUndefined();
      // Re-attached at that read: the 7 sent before it were not counted. The next 7 are.
      expect(counted(back)).toBe(5);
      expect(attached(lab)).toEqual(mode === 'tcx' ? { tcx: 2, tc: 0 } : { tcx: 0, tc: 2 });
      sendLoopReturns(lab, 7);
      const after = c.read();
      expect(counted(after)).toBe(12);
      expect(after.seen.ingress).toBeGreaterThanOrEqual(first.seen.ingress + 7);
      expect(after.seen.egress).toBeGreaterThanOrEqual(first.seen.egress);
      expect(logged).toEqual([
        'uplink deleted; the eBPF counters no longer count',
        'eBPF counters re-attached to the re-created uplink; packets between its deletion and now were not counted',
      ]);

      c.close();
      expect(attached(lab)).toEqual({ tcx: 0, tc: 0 });
    });
  }

  it('close() after the uplink went, unread, neither throws nor touches the interface re-created under its name', () => {
    for (const mode of ['tcx', 'tc'] as const) {
      const c = EbpfCounter.open({ ifname: UPLINK, netnsPath: lab.nodeNetns, attach: mode });
      lab.deleteUplink();
      expect(() => c.close()).not.toThrow(); // the old code (tc): "interface cbe0: No such device"
      lab.wireUplink();
    }
    // Another counter's filters (a new agent's, in a rolling update) on the re-created interface stay.
    const c = EbpfCounter.open({ ifname: UPLINK, netnsPath: lab.nodeNetns, attach: 'tc' });
    lab.deleteUplink();
    lab.wireUplink();
    const other = EbpfCounter.open({ ifname: UPLINK, netnsPath: lab.nodeNetns, attach: 'tc' });
    closers.push(() => other.close());
    c.close(); // the old code detached by name: the other counter's filters
    expect(attached(lab)).toEqual({ tcx: 0, tc: 2 });
  });

  it('the stand-in agent keeps what it counted and says why, then counts again', async () => {
    const agent: Agent = await startAgent(lab, 'tcx');
    closers.push(() => agent.kill());
    expect(agent.hello.backend).toBe('ebpf');
    const read = () => agent.read() as Promise<CounterReading & { stopped?: string }>;
    sendLoopReturns(lab, 3);
    expect(counted(await read())).toBe(3);
    const oldIndex = lab.uplinkIndex();
    lab.deleteUplink();
    const gone = await read();
    expect(gone.stopped).toBe(stoppedText(oldIndex));
    expect(counted(gone)).toBe(3);
    lab.wireUplink();
    expect((await read()).stopped).toBeUndefined();
    sendLoopReturns(lab, 4);
    expect(counted(await read())).toBe(7);
  });
});
