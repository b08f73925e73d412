import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BundleParseError } from '../../../src/bundle/errors.js';
import { parseIpAddrJson, parseIpRouteJson, summarizeRoutes } from '../../../src/bundle/parse-ip.js';

const TEXT = join(import.meta.dirname, '../../fixtures/text');
const read = (f: string): string => readFileSync(join(TEXT, f), 'utf8');

describe('ip -j addr parser on outputs captured in a netns', () => {
  it('gives interfaces with kube-ipvs0 first and marked, addresses v4+v6 with scope, label and flags', () => {
    const { value, warnings } = parseIpAddrJson(read('ip-d-addr.json'), 'ip-addr.json');
    expect(warnings).toEqual([]);
    expect(value.interfaces.map((i) => i.name)).toEqual(['kube-ipvs0', 'lo', 'eth0', 'cni0']);
    const ipvs = value.interfaces[0]!;
    expect(ipvs).toMatchObject({ isKubeIpvs: true, up: false, kind: 'bridge' });
    expect(ipvs.addresses.map((a) => `${a.address}/${a.prefixLen}`)).toEqual(['10.96.0.10/32', '203.0.113.50/32']);
    const eth0 = value.interfaces.find((i) => i.name === 'eth0')!;
    expect(eth0).toMatchObject({ kind: 'veth', up: true, mtu: 1500, isKubeIpvs: false });
    expect(eth0.mac).toMatch(/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
    expect(eth0.addresses).toEqual([
      { family: 4, address: '10.77.0.2', prefixLen: 24, scope: 'global', label: 'eth0', flags: ['permanent'] },
      { family: 6, address: 'fd77::2', prefixLen: 64, scope: 'global', flags: ['nodad', 'permanent'] },
      expect.objectContaining({ family: 6, scope: 'link', prefixLen: 64 }),
    ]);
    expect(value.interfaces.find((i) => i.name === 'lo')!.mac).toBeUndefined();
  });

  it('reads plain `ip -j addr` (no -d): same addresses, no interface kinds', () => {
    const d = parseIpAddrJson(read('ip-d-addr.json'), 'a').value;
    const plain = parseIpAddrJson(read('ip-addr.json'), 'b').value;
    expect(plain.interfaces.map((i) => i.kind)).toEqual([undefined, undefined, undefined, undefined]);
    expect(plain.interfaces.map((i) => i.addresses)).toEqual(d.interfaces.map((i) => i.addresses));
  });

  it('skips a bad interface or address with a warning naming file and item, keeping the rest', () => {
    const items = JSON.parse(read('ip-addr.json')) as Record<string, unknown>[];
    delete items[1]!.ifname;
    (items[2]!.addr_info as Record<string, unknown>[])[0]!.local = '10.244.1.300';
    const { value, warnings } = parseIpAddrJson(JSON.stringify(items), 'bundle/ip-addr.json');
    expect(value.interfaces.map((i) => i.name)).toEqual(['kube-ipvs0', 'lo', 'cni0']);
    expect(value.interfaces.find((i) => i.name === 'cni0')!.addresses.map((a) => a.address)).not.toContain(
      '10.244.1.300',
    );
    expect(warnings).toEqual([
      'bundle/ip-addr.json: item [1]: no "ifname"; interface skipped',
      'bundle/ip-addr.json: item [2] (cni0) addr_info[0]: "local" "10.244.1.300" is not an IP address; address skipped',
    ]);
  });

  it('rejects truncated JSON with file and line', () => {
    const text = JSON.stringify(JSON.parse(read('ip-addr.json')), null, 1);
    const cut = text.slice(0, Math.floor(text.length / 2));
    expect(() => parseIpAddrJson(cut, 'bundle/ip-addr.json')).toThrow(BundleParseError);
    expect(() => parseIpAddrJson(cut, 'bundle/ip-addr.json')).toThrow(/^bundle\/ip-addr\.json:\d+: not valid JSON/);
    expect(() => parseIpAddrJson('{"ifname":"x"}', 'a.json')).toThrow(/^a\.json:1: document 1 is not a JSON array/);
  });
});

describe('ip -j route parser', () => {
  it('finds the uplinks and the pod CIDR routes of the captured tables', () => {
    const v4 = parseIpRouteJson(read('ip-route.json'), 'ip-route.json', 4);
    const v6 = parseIpRouteJson(read('ip-6-route.json'), 'ip6-route.json', 6);
    expect([...v4.warnings, ...v6.warnings]).toEqual([]);
    const s = summarizeRoutes([...v4.value, ...v6.value]);
    expect(s.uplink).toBe('eth0');
    expect(s.uplink6).toBe('eth0');
    expect(s.podCidrRoutes.map((r) => `${r.dst} dev ${r.dev}`)).toEqual(['10.244.1.0/24 dev cni0']);
    expect(s.routes.find((r) => r.dst === '10.244.2.0/24')).toEqual({
      family: 4,
      dst: '10.244.2.0/24',
      dev: 'eth0',
      gateway: '10.77.0.1',
      type: 'unicast',
    });
    expect(s.routes.find((r) => r.family === 6 && r.dst === 'default')).toMatchObject({
      gateway: 'fd77::1',
      metric: 1024,
    });
  });

  it('accepts v4 and v6 lists appended in one file, multipath and Calico blackhole routes', () => {
    const text =
      '[{"dst":"default","flags":[],"nexthops":[{"gateway":"10.0.0.1","dev":"ens5","weight":1,"flags":[]}]},' +
      '{"type":"blackhole","dst":"10.244.7.0/26","protocol":"bird","flags":[]},' +
      '{"dst":"10.244.7.3","dev":"cali12ab","scope":"link","flags":[]}]\n' +
      read('ip-6-route.json');
    const { value, warnings } = parseIpRouteJson(text, 'ip-route.json');
    expect(warnings).toEqual([]);
    const s = summarizeRoutes(value);
    expect(s.uplink).toBe('ens5');
    expect(s.podCidrRoutes.map((r) => r.dst)).toEqual(['10.244.7.0/26', '10.244.7.3/32']);
  });

  it('warns about a route it cannot read and about a default route of unknown family', () => {
    const { value, warnings } = parseIpRouteJson(
      '[{"dst":"10.1.0.0/33","dev":"x"},{"dst":"default","dev":"wg0"},{"dst":"10.2.0.0/16","dev":"y"}]',
      'r.json',
    );
    expect(value.map((r) => r.dst)).toEqual(['10.2.0.0/16']);
    expect(warnings[0]).toBe('r.json: item [0]: "dst" "10.1.0.0/33" is not a prefix; route skipped');
    expect(warnings[1]).toMatch(/^r\.json: item \[1\]: cannot tell the family/);
  });
});
