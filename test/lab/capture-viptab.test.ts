// eBPF counters when the lab's VIP entries find their viptab buckets full: the program must
// find them through vips4/vips6 (the bucket's `more`) and count exactly what was sent, as
// when they sit in their buckets (test/lab/capture-ebpf.test.ts).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EbpfCounter } from '../../src/capture/ebpf.js';
import { isRoot } from '../support/netns.js';
import { bucketMates } from '../support/vip-buckets.js';
import { expectCounters, merge } from './capture-expect.js';
import { CaptureLab, labTargets, sendScenario, UPLINK, V4, V6 } from './capture-lab.js';

describe.skipIf(!isRoot)('eBPF counters, VIP entries in full buckets (real kernel, namespaces cbe-*)', () => {
  let lab: CaptureLab;
  beforeAll(() => {
    lab = new CaptureLab();
  });
  afterAll(() => lab?.destroy());

  it('counts exactly what was sent (v4 + v6, tcp + udp)', () => {
    const c = EbpfCounter.open({ ifname: UPLINK, netnsPath: lab.nodeNetns, attach: 'tcx' });
    try {
      const t = labTargets();
      // Two other keys first in each lab VIP key's bucket: the lab's own key is the third.
      const mates = t.vips.flatMap((v) =>
        bucketMates(v.address, v.port, v.proto, 2).map((address) => ({ ...v, address })),
      );
      c.setTargets({ ...t, vips: [...mates, ...t.vips] });
      const want = merge(sendScenario(lab, V4), sendScenario(lab, V6));
      expect(want.filter((w) => w.kind === 'to_lb').length).toBeGreaterThan(0);
      expectCounters(c.read(), want);
    } finally {
      c.close();
    }
  });
});
