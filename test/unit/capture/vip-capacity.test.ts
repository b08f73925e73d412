// The counters' targets within a backend's VIP bound (withinVipCapacity): the first VIP:ports
// of each address family in the index's order, and how many are left out.
import { describe, expect, it } from 'vitest';
import { type Targets, withinVipCapacity } from '../../../src/capture/targets.js';

const targets = (v4: number, v6: number): Targets => ({
  vips: [
    ...Array.from({ length: v4 }, (_, i) => ({ address: `198.18.0.${i}`, port: 80, proto: 'tcp' as const })),
    ...Array.from({ length: v6 }, (_, i) => ({ address: `2001:db8::${i}`, port: 443, proto: 'tcp' as const })),
  ],
  localPrefixes: [{ cidr: '10.244.1.0/24', bound: false }],
  nodePorts: [{ port: 30080, proto: 'tcp' }],
});

describe('withinVipCapacity', () => {
  it('keeps every target when each family is within the bound (the same object)', () => {
    const t = targets(3, 3);
    expect(withinVipCapacity(t, 3)).toEqual({ targets: t, notCounted: 0 });
    expect(withinVipCapacity(t, Infinity).targets).toBe(t);
  });

  it('keeps the first VIPs of each family up to the bound, and counts the others', () => {
    const r = withinVipCapacity(targets(5, 2), 3);
    expect(r.notCounted).toBe(2);
    expect(r.targets.vips.map((v) => v.address)).toEqual([
      '198.18.0.0',
      '198.18.0.1',
      '198.18.0.2',
      '2001:db8::0',
      '2001:db8::1',
    ]);
    expect(r.targets.localPrefixes).toEqual(targets(0, 0).localPrefixes);
    expect(r.targets.nodePorts).toEqual(targets(0, 0).nodePorts);
  });
});
