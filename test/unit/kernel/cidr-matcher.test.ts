import { describe, expect, it } from 'vitest';
import { cidrMatcher, inCidr } from '../../../src/kernel/ip.js';

describe('cidrMatcher', () => {
  it('agrees with inCidr on prefixes of every length, both families', () => {
    const cidrs = [
      '10.244.3.0/24',
      '192.168.0.0/17',
      '172.16.5.4/32',
      '0.0.0.0/0',
      'fd00:10:244:3::/64',
      '2001:db8::/32',
    ];
    const ips = [
      '10.244.3.0',
      '10.244.3.255',
      '10.244.4.1',
      '192.168.127.255',
      '192.168.128.0',
      '172.16.5.4',
      '172.16.5.5',
      '255.255.255.255',
      'fd00:10:244:3::17',
      'fd00:10:244:4::1',
      '2001:db8:ffff::1',
      '2001:db9::1',
    ];
    for (const c of cidrs) {
      const m = cidrMatcher([c]);
      for (const ip of ips) expect(m.has(ip), `${ip} in ${c}`).toBe(inCidr(ip, c));
    }
    const none = cidrMatcher(['10.0.0.0/8']);
    expect(none.has('11.0.0.1')).toBe(false);
  });

  it('matches any of several CIDRs', () => {
    const m = cidrMatcher(['10.1.0.0/16', '10.2.0.0/16']);
    expect([m.has('10.1.9.9'), m.has('10.2.0.1'), m.has('10.3.0.1')]).toEqual([true, true, false]);
  });

  it('reports malformed CIDRs and matches nothing with them; bad addresses never match', () => {
    const m = cidrMatcher(['10.0.0.0/33', 'banana/8', '10.0.0.0/', '1.2.3/24', '10.9.0.0/16']);
    expect(m.invalid).toEqual(['10.0.0.0/33', 'banana/8', '10.0.0.0/', '1.2.3/24']);
    for (const bad of ['', '10.9', '10.9.0.256', '10.9.0.1.5', '10..9.1', 'x', '::ffff:zz'])
      expect(m.has(bad), bad).toBe(false);
    expect(m.has('10.9.1.1')).toBe(true);
  });

  it('a bare address is a /32 (or /128)', () => {
    expect(cidrMatcher(['10.0.0.1']).has('10.0.0.1')).toBe(true);
    expect(cidrMatcher(['10.0.0.1']).has('10.0.0.2')).toBe(false);
    expect(cidrMatcher(['fd00::1']).has('fd00::1')).toBe(true);
  });
});
