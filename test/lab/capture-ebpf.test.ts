// eBPF counters on a real kernel: exact counts for known traffic (v4 and v6,
// TCP and UDP, matching and not), with TCX and with legacy cls_bpf; live map
// updates; nothing left behind after close or after a SIGKILL.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TC_HANDLE, TC_PRIORITY } from '../../src/capture/attach.js';
import { EbpfCounter } from '../../src/capture/ebpf.js';
import { bpfAddon } from '../../src/native/bpf.js';
import { isRoot } from '../support/netns.js';
import { expectCounters, merge } from './capture-expect.js';
import {
  type Agent,
  CaptureLab,
  labTargets,
  PAYLOAD,
  PORTS,
  sendScenario,
  startAgent,
  UPLINK,
  V4,
  V6,
} from './capture-lab.js';

/** Program ids attached to the node's uplink: TCX (both hooks) and our cls_bpf filters. */
function attached(lab: CaptureLab): { tcx: number[]; tc: number[] } {
  const a = bpfAddon();
  const ns = lab.nodeNetns;
  return {
    tcx: [...a.bpfTcxQuery(UPLINK, false, ns), ...a.bpfTcxQuery(UPLINK, true, ns)],
    tc: [false, true].map((eg) => a.bpfTcQuery(UPLINK, eg, TC_HANDLE, TC_PRIORITY, ns)).filter((id) => id !== 0),
  };
}

async function until(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}

describe.skipIf(!isRoot)('eBPF counters (real kernel, namespaces cbe-*)', () => {
  let lab: CaptureLab;
  const open: EbpfCounter[] = [];
  const agents: Agent[] = [];
  const openCounter = (attach: 'tcx' | 'tc') => {
    const c = EbpfCounter.open({ ifname: UPLINK, netnsPath: lab.nodeNetns, attach });
    open.push(c);
    return c;
  };

  beforeAll(() => {
    lab = new CaptureLab();
  });
  afterEach(async () => {
    for (const c of open.splice(0)) c.close();
    for (const a of agents.splice(0)) await a.kill();
  });
  afterAll(() => lab?.destroy());

  it('counts bound sources that are in the host hash, not among the prefixes compared in place', () => {
    // Host addresses past the first few (here the lab's bound source, after the node IP and five
    // others, as kube-ipvs0's many VIPs are) are only in hosts4/hosts6, and the config says the
    // hash holds some: the program must look there, also though it skips the hash on nodes
    // whose host addresses all fit in place.
    const t = labTargets();
    const others = [V4, V6].flatMap((f) =>
      [1, 2, 3, 4, 5].map((i) => ({ cidr: f === V4 ? `198.51.100.${i}/32` : `2001:db8:ff::${i}/128`, bound: true })),
    );
    const bound = t.localPrefixes.filter((p) => p.cidr === V4.boundSrc || p.cidr === V6.boundSrc);
    t.localPrefixes = [...t.localPrefixes.filter((p) => !bound.includes(p)), ...others, ...bound];
    const c = openCounter('tcx');
    c.setTargets(t);
    const want = merge(sendScenario(lab, V4), sendScenario(lab, V6));
    expectCounters(c.read(), want);
  });

  for (const mode of ['tcx', 'tc'] as const) {
    it(`counts exactly what was sent (${mode}, v4 + v6, tcp + udp)`, () => {
      const c = openCounter(mode);
      expect(c.attachMode).toBe(mode);
      c.setTargets(labTargets());
      const want = merge(sendScenario(lab, V4), sendScenario(lab, V6));
      const r = c.read();
      expectCounters(r, want);
      expect(r.drops.counterMapFull).toBe(0);
      // Every packet was looked at, counted or not (the RSTs and ICMP errors too).
      const counted = want.reduce((s, w) => s + w.packets, 0);
      expect(r.seen.ingress + r.seen.egress).toBeGreaterThan(counted + 2 * 16);
      if (mode === 'tc') expect(lab.tcFilters()).toMatch(/clbp_ingress[\s\S]*clbp_egress/);
      c.close();
      expect(attached(lab)).toEqual({ tcx: [], tc: [] });
      expect(lab.tcFilters()).toBe('');
    });
  }

  it('applies target changes at once, without re-attaching', () => {
    const c = openCounter('tcx');
    c.setTargets(labTargets([V4]));
    const before = attached(lab).tcx;
    const first = sendScenario(lab, V4);
    // Move the VIP's UDP entry from port 80 to port 81 and drop the NodePorts.
    const t = labTargets([V4]);
    t.vips = t.vips.map((v) => (v.proto === 'udp' ? { ...v, port: PORTS.vipOtherUdp } : v));
    t.nodePorts = [];
    c.setTargets(t);
    const second = sendScenario(lab, V4).filter((e) => !(e.kind === 'loop_return' && e.target === '0.0.0.0'));
    const to81 = { target: V4.vip, port: PORTS.vipOtherUdp, proto: 'udp' as const, kind: 'to_lb' as const };
    const moved = second.map((e) =>
      e.kind === 'to_lb' && e.proto === 'udp' ? { ...to81, packets: 4, bytes: 4 * (V4.udpOverhead + PAYLOAD) } : e,
    );
    expectCounters(c.read(), merge(first, moved));
    expect(attached(lab).tcx).toEqual(before);
  });

  it('a SIGKILLed agent leaves nothing attached (TCX)', async () => {
    const agent = await startAgent(lab, 'tcx');
    agents.push(agent);
    expect(agent.hello.attach).toBe('tcx');
    expect(attached(lab).tcx).toHaveLength(2);
    await agent.kill();
    // The links are released with the dead process's files.
    expect(await until(() => attached(lab).tcx.length === 0, 3000)).toBe(true);
    expect(attached(lab).tc).toEqual([]);
  });

  it('cls_bpf filters of a SIGKILLed agent are removed at the next start', async () => {
    const agent = await startAgent(lab, 'tc');
    agents.push(agent);
    expect(agent.hello.attach).toBe('tc');
    await agent.kill();
    const left = attached(lab).tc;
    expect(left).toHaveLength(2);
    const names = left.map((id) => bpfAddon().bpfProgInfoById(id)?.name).sort();
    expect(names).toEqual(['clbp_egress', 'clbp_ingress']);
    // The next start (here with TCX) removes them before attaching.
    const c = openCounter('tcx');
    expect(attached(lab).tc).toEqual([]);
    c.setTargets(labTargets([V4]));
    expectCounters(c.read(), []);
    const want = sendScenario(lab, V4);
    expectCounters(c.read(), want);
    c.close();
    expect(attached(lab)).toEqual({ tcx: [], tc: [] });
  });

  it('names the interface when it does not exist', () => {
    expect(() => EbpfCounter.open({ ifname: 'cbe-nope', netnsPath: lab.nodeNetns })).toThrow(
      /cbe-nope.*No such device/,
    );
  });
});
