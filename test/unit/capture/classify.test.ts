// The pcap path's header parser and classifier (the eBPF program's rules in
// TypeScript), on hand-built frames: whole, VLAN-tagged, with IPv6 extension
// headers, fragmented, truncated at every length, and malformed.
import { describe, expect, it } from 'vitest';
import { classify, parseHeaders, TargetIndex } from '../../../src/capture/classify.js';
import { formatAddress16, type Targets } from '../../../src/capture/targets.js';
import { parseIP } from '../../../src/kernel/ip.js';

function eth(type: number, payload: Buffer, vlan?: number): Buffer {
  const h = Buffer.alloc(14);
  h.writeUInt16BE(vlan === undefined ? type : 0x8100, 12);
  const tag = vlan === undefined ? Buffer.alloc(0) : Buffer.from([vlan >> 8, vlan & 0xff, type >> 8, type & 0xff]);
  return Buffer.concat([h, tag, payload]);
}

function ports(sport: number, dport: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt16BE(sport, 0);
  b.writeUInt16BE(dport, 2);
  return b;
}

function ipv4(src: string, dst: string, proto: number, l4: Buffer, fragOffset = 0): Buffer {
  const h = Buffer.alloc(20);
  h[0] = 0x45;
  h.writeUInt16BE(20 + l4.length, 2);
  h.writeUInt16BE(fragOffset, 6);
  h[8] = 64;
  h[9] = proto;
  parseIP(src).copy(h, 12);
  parseIP(dst).copy(h, 16);
  return Buffer.concat([h, l4]);
}

function ipv6(src: string, dst: string, next: number, rest: Buffer): Buffer {
  const h = Buffer.alloc(40);
  h[0] = 0x60;
  h.writeUInt16BE(rest.length, 4);
  h[6] = next;
  h[7] = 64;
  parseIP(src).copy(h, 8);
  parseIP(dst).copy(h, 24);
  return Buffer.concat([h, rest]);
}

const targets: Targets = {
  vips: [
    { address: '192.0.2.10', port: 80, proto: 'tcp' },
    { address: '2001:db8::10', port: 0, proto: 'udp' },
  ],
  localPrefixes: [
    { cidr: '10.244.1.0/24', bound: false },
    { cidr: '10.0.0.5', bound: true },
    { cidr: '10.244.1.1/32', bound: true },
  ],
  nodePorts: [{ port: 30080, proto: 'tcp' }],
};

describe('parseHeaders', () => {
  const v4 = eth(0x0800, ipv4('10.244.1.7', '192.0.2.10', 6, ports(40000, 80)));

  it('reads addresses, protocol and ports (IPv4, VLAN, IPv6 with extension headers)', () => {
    const h = parseHeaders(v4, 0, v4.length, 14)!;
    expect([formatAddress16(h.src), formatAddress16(h.dst), h.proto, h.sport, h.dport, h.v4]).toEqual([
      '10.244.1.7',
      '192.0.2.10',
      6,
      40000,
      80,
      true,
    ]);
    const tagged = eth(0x0800, ipv4('10.244.1.7', '192.0.2.10', 6, ports(1, 2)), 100);
    expect(parseHeaders(tagged, 0, tagged.length, 14)?.dport).toBe(2);
    const hopByHop = Buffer.concat([Buffer.from([17, 0, 0, 0, 0, 0, 0, 0]), ports(5353, 53)]);
    const v6 = eth(0x86dd, ipv6('fd00::1', '2001:db8::10', 0, hopByHop));
    expect(parseHeaders(v6, 0, v6.length, 14)).toMatchObject({ proto: 17, sport: 5353, dport: 53, v4: false });
  });

  it('reads a frame at an offset inside a batch buffer', () => {
    const batch = Buffer.concat([Buffer.alloc(7, 0xee), v4]);
    expect(parseHeaders(batch, 7, v4.length, 14)?.sport).toBe(40000);
  });

  it('ignores every truncation, non-first fragments, non-IP and port-less protocols', () => {
    for (let len = 0; len < 14 + 20 + 4; len++) expect(parseHeaders(v4, 0, len, 14)).toBeUndefined();
    const frag = eth(0x0800, ipv4('10.244.1.7', '192.0.2.10', 6, ports(1, 80), 185));
    expect(parseHeaders(frag, 0, frag.length, 14)).toBeUndefined();
    const firstFrag = eth(0x0800, ipv4('10.244.1.7', '192.0.2.10', 6, ports(1, 80), 0x2000));
    expect(parseHeaders(firstFrag, 0, firstFrag.length, 14)?.dport).toBe(80);
    const arp = eth(0x0806, Buffer.alloc(28));
    expect(parseHeaders(arp, 0, arp.length, 14)).toBeUndefined();
    const icmp = eth(0x0800, ipv4('10.244.1.7', '192.0.2.10', 1, Buffer.alloc(8)));
    expect(parseHeaders(icmp, 0, icmp.length, 14)).toBeUndefined();
    const v6frag = eth(
      0x86dd,
      ipv6('fd00::1', '2001:db8::10', 44, Buffer.concat([Buffer.from([17, 0, 0, 0x08, 0, 0, 0, 1]), ports(1, 2)])),
    );
    expect(parseHeaders(v6frag, 0, v6frag.length, 14)).toBeUndefined();
  });
});

describe('classify (same rules as the eBPF program)', () => {
  const idx = new TargetIndex(targets);
  const headers = (src: string, dst: string, proto: number, dport: number) => {
    const f = src.includes(':')
      ? eth(0x86dd, ipv6(src, dst, proto, ports(1234, dport)))
      : eth(0x0800, ipv4(src, dst, proto, ports(1234, dport)));
    return parseHeaders(f, 0, f.length, 14)!;
  };
  const names = (cs: ReturnType<typeof classify>) => cs.map((c) => `${c.kind} ${formatAddress16(c.target)}:${c.port}`);

  it('to_lb: egress, local source, VIP with the exact port or port 0', () => {
    expect(names(classify(headers('10.244.1.7', '192.0.2.10', 6, 80), 'egress', idx))).toEqual(['to_lb 192.0.2.10:80']);
    expect(names(classify(headers('10.244.1.7', '192.0.2.10', 6, 81), 'egress', idx))).toEqual([]);
    expect(names(classify(headers('10.9.9.9', '192.0.2.10', 6, 80), 'egress', idx))).toEqual([]);
    expect(classify(headers('10.244.1.7', '2001:db8::10', 17, 9), 'egress', idx)).toEqual([]); // v4 source, v6 VIP: no local match
  });

  it('loop_return and hc_local_src on ingress; a bound address inside the pod CIDR is both', () => {
    expect(names(classify(headers('10.244.1.7', '10.0.0.5', 6, 30080), 'ingress', idx))).toEqual([
      'loop_return 0.0.0.0:30080',
    ]);
    expect(names(classify(headers('10.244.1.7', '10.244.1.9', 17, 8080), 'ingress', idx))).toEqual([
      'loop_return 10.244.1.9:8080',
    ]);
    expect(names(classify(headers('10.0.0.5', '10.0.0.5', 6, 10256), 'ingress', idx))).toEqual([
      'hc_local_src 10.0.0.5:10256',
    ]);
    expect(names(classify(headers('10.244.1.1', '10.244.1.9', 6, 30080), 'ingress', idx))).toEqual([
      'hc_local_src 10.244.1.1:30080',
      'loop_return 0.0.0.0:30080',
    ]);
    expect(idx.localFlags(headers('10.244.1.1', '10.0.0.5', 6, 1).src)).toBe(3);
    expect(classify(headers('198.51.100.1', '10.0.0.5', 6, 30080), 'ingress', idx)).toEqual([]);
  });
});
