// AddressPortMap (two levels, IPv4 addresses as 32-bit integers) against one Map over key(): the
// same answers for every address, protocol and port, including the text cases (IPv6, an unknown
// protocol, no port) and addresses whose 32-bit form is negative.
import { describe, expect, it } from 'vitest';
import { AddressPortMap, addTo, type Key, key, type OneOrMore } from '../../../src/model/address-key.js';

describe('AddressPortMap', () => {
  const ips = [
    '10.244.1.5',
    '10.244.1.6',
    '203.0.113.1',
    '255.255.255.255',
    '0.0.0.0',
    '2001:db8::1',
    'fd00::1',
    'not-an-ip',
  ];
  const protos = ['TCP', 'UDP', 'SCTP', 'ICMP'];
  const ports = [undefined, 0, 80, 8080, 65535];

  it('answers as one map over key() would', () => {
    const two = new AddressPortMap<{ n: number }>();
    const one = new Map<Key, OneOrMore<{ n: number }>>();
    let n = 0;
    // Every third combination is added, some twice: one value alone, or a list.
    for (const ip of ips) {
      for (const proto of protos) {
        for (const port of ports) {
          if (n++ % 3 !== 0) continue;
          for (let k = 0; k < 1 + (n % 2); k++) {
            const v = { n: n * 10 + k };
            two.add(ip, proto, port, v);
            addTo(one, key(ip, proto, port), v);
          }
        }
      }
    }
    let found = 0;
    for (const ip of ips) {
      for (const proto of protos) {
        for (const port of ports) {
          const want = one.get(key(ip, proto, port));
          expect(two.get(ip, proto, port)).toEqual(want);
          expect(two.has(ip, proto, port)).toBe(want !== undefined);
          if (want !== undefined) found++;
        }
      }
    }
    expect(found).toBeGreaterThan(50);
  });
});
