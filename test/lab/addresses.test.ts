// Address reader against the real kernel: what `ip -j addr` shows, and live events.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readAddresses, watchAddresses } from '../../src/kernel/addresses.js';
import type { AddressEvent } from '../../src/kernel/types.js';
import { isRoot, Netns, vethPair } from '../support/netns.js';

interface IpJsonAddr {
  family: 'inet' | 'inet6';
  local: string;
  prefixlen: number;
  scope: string;
}
interface IpJsonLink {
  ifindex: number;
  ifname: string;
  mtu: number;
  address?: string;
  linkinfo?: { info_kind?: string };
  addr_info: IpJsonAddr[];
}

describe.skipIf(!isRoot)('addresses (rtnetlink, real kernel)', () => {
  let a: Netns;
  let b: Netns;
  beforeAll(() => {
    a = Netns.create('cbl-ad');
    b = Netns.create('cbl-ad');
    vethPair(a, 'uplink0', b, 'peer0');
    a.sh(`
      ip link add br-pods type bridge && ip link set br-pods up
      ip addr add 10.20.0.2/24 dev uplink0
      ip addr add 10.20.0.3/24 dev uplink0
      ip addr add 2001:db8:20::2/64 dev uplink0 nodad
      ip addr add 10.244.1.1/24 dev br-pods
      ip addr add fd00:244:1::1/64 dev br-pods nodad`);
  });
  afterAll(() => {
    a?.delete();
    b?.delete();
  });

  it('equals ip -j -d addr: interfaces, kinds, addresses, prefixes, scopes', async () => {
    const { status, snapshot } = await readAddresses({ netns: a.path });
    expect(status.available).toBe(true);
    const ip = JSON.parse(a.run('ip', '-j', '-d', 'addr')) as IpJsonLink[];
    const ours = snapshot!.interfaces;
    expect(ours.map((i) => i.name).sort()).toEqual(ip.map((l) => l.ifname).sort());
    for (const l of ip) {
      const i = ours.find((x) => x.index === l.ifindex)!;
      expect(i.name).toBe(l.ifname);
      expect(i.mtu).toBe(l.mtu);
      expect(i.kind).toBe(l.linkinfo?.info_kind);
      if (l.address && l.ifname !== 'lo') expect(i.mac).toBe(l.address);
      const want = l.addr_info.map((x) => `${x.local}/${x.prefixlen} ${x.scope}`).sort();
      expect(i.addresses.map((x) => `${x.address}/${x.prefixLen} ${x.scope}`).sort()).toEqual(want);
    }
    const uplink = ours.find((i) => i.name === 'uplink0')!;
    expect(uplink.addresses.find((x) => x.address === '10.20.0.3')!.flags).toContain('secondary');
  });

  it('streams add and remove events, v4 and v6', async () => {
    const events: AddressEvent[] = [];
    let resyncs = 0;
    const stop = watchAddresses(
      (e) => events.push(e),
      () => resyncs++,
      { netns: a.path },
    );
    try {
      a.sh(`ip addr add 192.0.2.77/32 dev br-pods
            ip addr add 2001:db8:77::7/128 dev br-pods nodad
            ip addr del 192.0.2.77/32 dev br-pods`);
      const deadline = Date.now() + 5000;
      while (events.filter((e) => e.address.address !== 'fe80::').length < 3 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
      const seen = events.map((e) => `${e.kind} ${e.address.address}/${e.address.prefixLen}`);
      expect(seen).toEqual(
        expect.arrayContaining(['add 192.0.2.77/32', 'add 2001:db8:77::7/128', 'remove 192.0.2.77/32']),
      );
      expect(seen.indexOf('add 192.0.2.77/32')).toBeLessThan(seen.indexOf('remove 192.0.2.77/32'));
      expect(resyncs).toBe(0);
    } finally {
      stop();
    }
  });
});
