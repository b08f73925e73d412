// How the node's local addresses are laid out for the eBPF program (ebpf-maps.ts
// localSets, bpf-layout.ts configValue): host addresses compared in place come
// first and carry the flags of the prefixes that hold them (the program's search
// ends at a host match), and a prefix says whether the host hash holds
// addresses inside it (without, the program reads no host filter for an address
// it holds).
import { describe, expect, it } from 'vitest';
import {
  CONFIG_N4,
  CONFIG_N6,
  CONFIG_NETS4,
  CONFIG_NETS6,
  configValue,
  LOCAL_BOUND,
  LOCAL_IN_HASH,
  LOCAL_POD,
  NET4_FLAGS,
  NET4_SIZE,
  NET6_FLAGS,
  NET6_SIZE,
} from '../../../src/capture/bpf-layout.js';
import { TargetIndex } from '../../../src/capture/classify.js';
import { localSets } from '../../../src/capture/ebpf-maps.js';
import { address16, type Targets } from '../../../src/capture/targets.js';

const hosts4 = (n: number, base: string) =>
  Array.from({ length: n }, (_, i) => ({ cidr: `${base}${i + 1}`, bound: true }));

function targets(localPrefixes: Targets['localPrefixes']): Targets {
  return { vips: [], localPrefixes, nodePorts: [] };
}

describe('localSets', () => {
  it('puts the first host addresses first, each with the flags of the prefixes that hold it', () => {
    // A node IP inside the pod CIDR (e.g. cni0's gateway), another outside.
    const l = localSets(
      targets([
        { cidr: '10.245.1.0/24', bound: false },
        { cidr: '10.245.1.1', bound: true },
        { cidr: '10.0.0.5', bound: true },
      ]),
    );
    expect(l.nets4.map((n) => [n.mask >>> 0, n.flags])).toEqual([
      [0xffffffff, LOCAL_BOUND | LOCAL_POD],
      [0xffffffff, LOCAL_BOUND],
      [0xffffff00, LOCAL_POD],
    ]);
    const v6 = localSets(
      targets([
        { cidr: 'fd45:1::/64', bound: false },
        { cidr: 'fd45:1::1', bound: true },
      ]),
    );
    expect(v6.nets6.map((n) => n.flags)).toEqual([LOCAL_BOUND | LOCAL_POD, LOCAL_POD]);
  });

  it('marks a prefix whose addresses the host hash holds some of, and no other', () => {
    // Four entries are compared in place (the pod CIDRs and the first two host addresses); the
    // rest go to the hash, one of them inside the first pod CIDR.
    const l = localSets(
      targets([
        { cidr: '10.245.1.0/24', bound: false },
        { cidr: '10.245.2.0/24', bound: false },
        ...hosts4(4, '10.0.0.'),
        { cidr: '10.245.1.77', bound: true },
      ]),
    );
    expect(l.hosts4.size).toBe(3);
    const prefixes = l.nets4.filter((n) => n.mask !== 0xffffffff);
    expect(prefixes.map((n) => [n.addr >>> 24, (n.addr >>> 8) & 255, n.inHash])).toEqual([
      [10, 1, true],
      [10, 2, false],
    ]);
    const b = configValue(l.nets4, l.nets6, { v4: true, v6: false });
    expect(b.readUInt32LE(CONFIG_N4)).toBe(4);
    const flags = [0, 1, 2, 3].map((i) => b.readUInt32LE(CONFIG_NETS4 + i * NET4_SIZE + NET4_FLAGS));
    expect(flags).toEqual([LOCAL_BOUND, LOCAL_BOUND, LOCAL_POD | LOCAL_IN_HASH, LOCAL_POD]);

    const v6 = localSets(
      targets([
        { cidr: 'fd45:1::/64', bound: false },
        ...Array.from({ length: 4 }, (_, i) => ({ cidr: `fd45:1::${i + 1}`, bound: true })),
      ]),
    );
    expect(v6.hosts6.size).toBe(1);
    const b6 = configValue(v6.nets4, v6.nets6, { v4: false, v6: true });
    expect(b6.readUInt32LE(CONFIG_N6)).toBe(4);
    expect(b6.readUInt32LE(CONFIG_NETS6 + 3 * NET6_SIZE + NET6_FLAGS)).toBe(LOCAL_POD | LOCAL_IN_HASH);
  });

  it('leaves the flags the pcap path classifies with unchanged', () => {
    const t = targets([
      { cidr: '10.245.1.0/24', bound: false },
      ...hosts4(4, '10.0.0.'),
      { cidr: '10.245.1.77', bound: true },
    ]);
    const idx = new TargetIndex(t);
    expect(idx.localFlags(address16('10.245.1.77'))).toBe(LOCAL_BOUND | LOCAL_POD);
    expect(idx.localFlags(address16('10.245.1.78'))).toBe(LOCAL_POD);
    expect(idx.localFlags(address16('10.0.0.1'))).toBe(LOCAL_BOUND);
    expect(idx.localFlags(address16('10.0.1.1'))).toBe(0);
  });
});
