// How many LB VIP:ports the eBPF counters hold per address family, on the real kernel: the
// program's vips4/vips6 maps (loaded, not attached) take exactly MAX_VIPS_PER_FAMILY keys and
// refuse one more, so the bound the agent keeps its targets within (withinVipCapacity) is the
// program's own. Past it the agent counts the first VIPs and says how many it does not
// (test/unit/capture/vip-capacity.test.ts), instead of losing every counter to E2BIG.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAP_VIPS4, MAP_VIPS6, MAX_VIPS_PER_FAMILY, vipKey } from '../../src/capture/bpf-layout.js';
import { bpfObjectPath } from '../../src/capture/ebpf.js';
import { type BpfObject, bpfAddon } from '../../src/native/bpf.js';
import { isRoot } from '../support/netns.js';

describe.skipIf(!isRoot)('eBPF counters: VIP capacity on the real kernel', () => {
  const addon = bpfAddon();
  let obj: BpfObject;

  beforeAll(() => {
    obj = addon.bpfObjectOpen(bpfObjectPath());
    addon.bpfObjectLoad(obj);
  });
  afterAll(() => {
    if (obj) addon.bpfObjectClose(obj);
  });

  for (const [map, address] of [
    [MAP_VIPS4, (i: number) => `198.18.${i >> 8}.${i & 255}`],
    [MAP_VIPS6, (i: number) => `2001:db8::${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}`],
  ] as const) {
    it(`${map} holds ${MAX_VIPS_PER_FAMILY} VIP:ports and refuses one more`, () => {
      const fd = addon.bpfObjectMapFd(obj, map);
      const value = Buffer.alloc(4);
      for (let i = 0; i < MAX_VIPS_PER_FAMILY; i++) addon.bpfMapUpdate(fd, vipKey(address(i), 80, 'tcp').key, value, 0);
      expect(() => addon.bpfMapUpdate(fd, vipKey(address(MAX_VIPS_PER_FAMILY), 80, 'tcp').key, value, 0)).toThrow(
        /Argument list too long|E2BIG/,
      );
    });
  }
});
