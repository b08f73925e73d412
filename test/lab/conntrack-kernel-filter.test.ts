// The eBPF socket filter on the conntrack event socket (kernel-filter.ts,
// native/bpf/ctevents.bpf.c) against the real kernel: two watches listen to the
// same namespace, one with the kernel filter and one filtering in user space
// only. Both must deliver the same events, and the kernel must have dropped
// exactly the events that touch no target: those the ours rule (model/ours.ts),
// applied to every event a third, unfiltered watch sees, says are not ours.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConntrackWatch } from '../../src/kernel/conntrack/events.js';
import { KERNEL_FILTER_MAX_KEYS, type KernelFilterStats } from '../../src/kernel/conntrack/kernel-filter.js';
import { ConntrackPrefilter } from '../../src/kernel/conntrack/prefilter.js';
import type { ConntrackEvent } from '../../src/kernel/types.js';
import { type Ours, tupleRuleOf } from '../../src/model/ours.js';
import { isRoot, Netns } from '../support/netns.js';

const TCP = 6;
const UDP = 17;

const TARGETS: Ours = {
  vips: [
    { address: '10.96.0.10', protoNum: TCP, port: 80 },
    { address: '10.96.0.11', protoNum: UDP, port: 53 },
  ],
  nodeIps: ['10.1.0.5'],
  podCidrs: ['10.244.1.0/24'],
  nodePorts: [
    { protoNum: TCP, port: 30080, healthCheck: false },
    { protoNum: TCP, port: 32000, healthCheck: true },
  ],
  endpoints: [{ address: '10.244.1.7', protoNum: TCP, port: 8080 }],
};

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}

const line = (e: ConntrackEvent): string =>
  `${e.type} ${e.entry.proto} ${e.entry.orig.src}:${e.entry.orig.sport ?? ''} > ${e.entry.orig.dst}:${e.entry.orig.dport ?? ''}`;

/** Creates and deletes one entry per spec (a NEW and a DESTROY event each). */
function entries(ns: Netns, specs: string[]): void {
  ns.sh(
    specs
      .map(
        (s) =>
          `conntrack -I ${s} -t 60 >/dev/null 2>&1 && conntrack -D ${s.replace(/ --state \S+| -r \S+ -q \S+ --reply-port-src \S+ --reply-port-dst \S+/g, '')} >/dev/null`,
      )
      .join('\n'),
  );
}

describe.skipIf(!isRoot)('conntrack events: kernel-side filter (eBPF socket filter, real kernel)', () => {
  let ns: Netns;
  let filtered: ConntrackWatch;
  let plain: ConntrackWatch;
  let all: ConntrackWatch;
  const seen = { filtered: [] as ConntrackEvent[], plain: [] as ConntrackEvent[], all: [] as ConntrackEvent[] };

  beforeAll(() => {
    ns = Netns.create('ckf-node');
    // Conntrack runs in a namespace once a rule uses it (IPv6 too: platform notes).
    ns.sh(
      'iptables -A OUTPUT -m conntrack --ctstate NEW -j ACCEPT; ip6tables -A OUTPUT -m conntrack --ctstate NEW -j ACCEPT',
    );
    const prefilter = new ConntrackPrefilter(TARGETS);
    filtered = new ConntrackWatch({
      netns: ns.path,
      prefilter,
      kernelFilter: true,
      onEvent: (e) => seen.filtered.push(e),
    });
    plain = new ConntrackWatch({ netns: ns.path, prefilter, onEvent: (e) => seen.plain.push(e) });
    all = new ConntrackWatch({ netns: ns.path, onEvent: (e) => seen.all.push(e) });
  });
  afterAll(() => {
    filtered?.stop();
    plain?.stop();
    all?.stop();
    ns?.delete();
  });

  /** Waits for the sentinel's DESTROY (a VIP entry with source port `port`) on both watches. */
  async function settle(port: number, vip = '10.96.0.10', dport = 80): Promise<void> {
    entries(ns, [`-p tcp -s 10.30.0.1 -d ${vip} --sport ${port} --dport ${dport} --state ESTABLISHED`]);
    const done = (l: ConntrackEvent[]) => l.some((e) => e.type === 'DESTROY' && e.entry.orig.sport === port);
    await until(() => done(seen.filtered) && done(seen.plain) && done(seen.all));
  }

  /** Where each watch's list stands, to look at the events of one step only. */
  const marks = () => ({ filtered: seen.filtered.length, all: seen.all.length });

  /**
   * The kernel passed exactly the step's events that are ours or IPv6, by the ours rule over
   * `ours` as the oracle, and dropped the others.
   */
  function expectOracleDecisions(
    ours: Ours,
    from: ReturnType<typeof marks>,
    before: KernelFilterStats,
    after: KernelFilterStats,
  ): void {
    const rule = tupleRuleOf(ours);
    const step = seen.all.slice(from.all);
    const passed = step.filter((e) => e.entry.family === 6 || rule(e.entry) !== undefined);
    expect(step.length).toBeGreaterThan(passed.length);
    expect(after.passed - before.passed).toBe(passed.length);
    expect(after.dropped - before.dropped).toBe(step.length - passed.length);
    expect(seen.filtered.slice(from.filtered).map(line)).toEqual(passed.map(line));
  }

  it('drops in the kernel exactly the events that touch no target, and loses none', async () => {
    expect(filtered.stats.kernelFilter).toBe('on');
    expect(plain.stats.kernelFilter).toBe('not requested');
    const before = filtered.kernelFilterStats()!;
    const from = marks();
    const kept = [
      '-p tcp -s 10.30.0.1 -d 10.96.0.10 --sport 1001 --dport 80 --state ESTABLISHED', // VIP
      '-p udp -s 10.30.0.1 -d 10.96.0.11 --sport 1002 --dport 53', // VIP, UDP
      '-p tcp -s 10.30.0.9 -d 10.1.0.5 --sport 1003 --dport 30080 --state ESTABLISHED', // node IP : NodePort
      // DNAT'ed to an endpoint: the reply comes from it.
      '-p tcp -s 10.30.0.1 -d 10.0.0.50 --sport 1004 --dport 80 -r 10.244.1.7 -q 10.30.0.1 --reply-port-src 8080 --reply-port-dst 1004 --state ESTABLISHED',
      '-p tcp -s fd00:30::1 -d fd00::100 --sport 1005 --dport 443 --state ESTABLISHED', // IPv6: passed on
    ];
    const dropped = [
      '-p tcp -s 10.30.0.1 -d 10.96.0.10 --sport 2001 --dport 81 --state ESTABLISHED', // VIP address, other port
      '-p udp -s 10.30.0.1 -d 10.96.0.10 --sport 2002 --dport 80', // VIP port, other protocol
      '-p tcp -s 10.30.0.9 -d 10.1.0.5 --sport 2003 --dport 22 --state ESTABLISHED', // node IP, not a NodePort
      '-p tcp -s 10.30.0.9 -d 10.1.0.6 --sport 2004 --dport 30080 --state ESTABLISHED', // NodePort on another address
      '-p tcp -s 10.30.0.1 -d 10.0.0.50 --sport 2005 --dport 80 -r 10.244.1.8 -q 10.30.0.1 --reply-port-src 8080 --reply-port-dst 2005 --state ESTABLISHED',
      '-p icmp -s 10.30.0.1 -d 10.96.0.10 --icmp-type 8 --icmp-code 0 --icmp-id 7', // a protocol no target uses
      '-p tcp -s 10.30.0.9 -d 10.1.0.5 --sport 2006 --dport 32000 --state ESTABLISHED', // a health-check NodePort
    ];
    entries(ns, [...kept, ...dropped]);
    await settle(3000);
    const after = filtered.kernelFilterStats()!;
    expect(after.dropped - before.dropped).toBe(dropped.length * 2);
    expect(after.passed - before.passed).toBe((kept.length + 1) * 2);
    expect(seen.filtered.map(line)).toEqual(seen.plain.map(line));
    const sports = new Set(seen.filtered.map((e) => e.entry.orig.sport));
    for (const p of [1001, 1002, 1003, 1004, 1005]) expect(sports.has(p)).toBe(true);
    for (const p of [2001, 2002, 2003, 2004, 2005, 2006]) expect(sports.has(p)).toBe(false);
    expectOracleDecisions(TARGETS, from, before, after);
  });

  it('follows the targets when the prefilter changes', async () => {
    const nextOurs: Ours = { ...TARGETS, vips: [{ address: '10.96.0.20', protoNum: TCP, port: 443 }] };
    const next = new ConntrackPrefilter(nextOurs);
    filtered.setPrefilter(next);
    plain.setPrefilter(next);
    const before = filtered.kernelFilterStats()!;
    const from = marks();
    entries(ns, [
      '-p tcp -s 10.30.0.1 -d 10.96.0.20 --sport 4001 --dport 443 --state ESTABLISHED', // the new VIP
      '-p tcp -s 10.30.0.1 -d 10.96.0.10 --sport 4002 --dport 80 --state ESTABLISHED', // the removed one
      '-p udp -s 10.30.0.1 -d 10.96.0.11 --sport 4003 --dport 53', // UDP: no target uses it any more
    ]);
    await settle(4004, '10.96.0.20', 443);
    const after = filtered.kernelFilterStats()!;
    expect(after.dropped - before.dropped).toBe(4);
    expect(after.passed - before.passed).toBe(4);
    expect(seen.filtered.map(line)).toEqual(seen.plain.map(line));
    expect(seen.filtered.filter((e) => e.entry.orig.sport === 4001)).toHaveLength(2);
    expectOracleDecisions(nextOurs, from, before, after);
  });

  it('falls back to user space when the targets do not fit in the kernel map', async () => {
    const endpoints = Array.from({ length: KERNEL_FILTER_MAX_KEYS }, (_, i) => ({
      address: `10.${128 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`,
      protoNum: TCP,
      port: 8080,
    }));
    const huge = new ConntrackPrefilter({ ...TARGETS, endpoints });
    filtered.setPrefilter(huge);
    plain.setPrefilter(huge);
    expect(filtered.stats.kernelFilter).toMatch(
      /^off: updating its keys: \d+ targets exceed the kernel filter's 262144 keys$/,
    );
    expect(filtered.kernelFilterStats()).toBeUndefined();
    // Detached: what the old keys would have dropped now reaches user space, and the exact test decides.
    entries(ns, ['-p tcp -s 10.30.0.1 -d 10.130.0.1 --sport 5001 --dport 8080 --state ESTABLISHED']);
    await settle(5002);
    expect(seen.filtered.map(line)).toEqual(seen.plain.map(line));
  });
});
