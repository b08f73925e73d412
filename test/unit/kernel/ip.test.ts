import { describe, expect, it } from 'vitest';
import { formatIPv4, formatIPv6, ipv4Number } from '../../../src/kernel/ip.js';

describe('formatIPv4', () => {
  it('gives the dotted text of every address', () => {
    const b = Buffer.alloc(4);
    for (let i = 0; i < 10_000; i++) {
      const n = (0xc0a80000 + i * 7919) >>> 0;
      b.writeUInt32BE(n, 0);
      const text = formatIPv4(b, 0);
      expect(text).toBe(`${b[0]}.${b[1]}.${b[2]}.${b[3]}`);
      expect(ipv4Number(text)).toBe(n);
    }
    expect(formatIPv4(Buffer.from([255, 255, 255, 255]), 0)).toBe('255.255.255.255');
    expect(formatIPv4(Buffer.from([9, 0, 0, 0, 1, 2]), 2)).toBe('0.0.1.2');
  });

  it('keeps the dotted form inside IPv4-mapped IPv6', () => {
    expect(formatIPv6(Buffer.from('00000000000000000000ffff0a000001', 'hex'), 0)).toBe('::ffff:10.0.0.1');
  });
});
