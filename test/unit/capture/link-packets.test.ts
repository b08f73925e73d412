// The interface packet counts that stand in for "packets the eBPF programs
// looked at", decoded from real RTM_NEWLINK replies (test/fixtures/netlink).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isL3LinkType } from '../../../src/capture/ebpf.js';
import { decodeLink } from '../../../src/capture/link-packets.js';

const decodeLinkIndex = (p: Buffer) => decodeLink(p).ifindex;
const decodeLinkType = (p: Buffer) => decodeLink(p).type;
const decodeLinkPackets = (p: Buffer) => decodeLink(p).totals;

import { NetlinkParseError, NLMSG_DONE, splitMessages, walkAttrs } from '../../../src/kernel/netlink/codec.js';

const IFLA_STATS = 7;
const IFLA_STATS64 = 23;
const links = readFileSync(join(import.meta.dirname, '../../fixtures/netlink/rtm-getlink.hex'), 'utf8')
  .split('\n')
  .filter(Boolean)
  .flatMap((h) => splitMessages(Buffer.from(h, 'hex')))
  .filter((m) => m.type !== NLMSG_DONE);

/** The same counts from the legacy 32-bit IFLA_STATS the kernel sends alongside. */
function stats32(p: Buffer): { ingress: number; egress: number } | undefined {
  let out: { ingress: number; egress: number } | undefined;
  walkAttrs(p, 16, p.length, (t, s) => {
    if (t === IFLA_STATS) out = { ingress: p.readUInt32LE(s), egress: p.readUInt32LE(s + 4) };
  });
  return out;
}

describe('decodeLinkIndex', () => {
  it('reads ifi_index, which tells a re-created interface of the same name from the one before', () => {
    expect(links.map((m) => decodeLinkIndex(m.payload))).toEqual(links.map((_, i) => i + 1));
    expect(() => decodeLinkIndex(links[0]!.payload.subarray(0, 7))).toThrow(NetlinkParseError);
  });
});

describe('decodeLinkType', () => {
  it('reads ifi_type, which chooses the eBPF object: lo and the veths start with an Ethernet header', () => {
    expect(links.map((m) => decodeLinkType(m.payload))).toEqual([772, 1, 1]);
    expect(links.map((m) => isL3LinkType(decodeLinkType(m.payload)))).toEqual([false, false, false]);
    // tun and WireGuard (ARPHRD_NONE), IP-in-IP (ARPHRD_TUNNEL), sit, GRE: the IP header first.
    expect([65534, 768, 776, 778].map(isL3LinkType)).toEqual([true, true, true, true]);
    expect(() => decodeLinkType(links[0]!.payload.subarray(0, 3))).toThrow(NetlinkParseError);
  });
});

describe('decodeLinkPackets', () => {
  it('reads rx/tx packets as the kernel reports them in its 32-bit stats too', () => {
    expect(links.length).toBeGreaterThan(2);
    for (const m of links) expect(decodeLinkPackets(m.payload)).toEqual(stats32(m.payload));
  });

  it('reads 64-bit rx and tx packets from their places in rtnl_link_stats64', () => {
    // The recorded namespace had sent nothing: put known counts into a real message.
    const p = Buffer.from(links[1]!.payload);
    walkAttrs(p, 16, p.length, (t, s) => {
      if (t !== IFLA_STATS64) return;
      p.writeBigUInt64LE(5_000_000_001n, s);
      p.writeBigUInt64LE(7n, s + 8);
      p.writeBigUInt64LE(99n, s + 16); // rx_bytes: not a packet count
    });
    expect(decodeLinkPackets(p)).toEqual({ ingress: 5_000_000_001, egress: 7 });
  });

  it('says undefined without IFLA_STATS64 and throws NetlinkParseError on truncation or corruption', () => {
    expect(decodeLinkPackets(links[0]!.payload.subarray(0, 16))).toBeUndefined();
    const p = links[0]!.payload;
    for (let cut = 0; cut < p.length; cut++) {
      try {
        decodeLinkPackets(p.subarray(0, cut));
      } catch (e) {
        expect(e).toBeInstanceOf(NetlinkParseError);
      }
    }
    for (let i = 0; i < p.length; i++) {
      const q = Buffer.from(p);
      q[i] = 0xff;
      try {
        decodeLinkPackets(q);
      } catch (e) {
        expect(e).toBeInstanceOf(NetlinkParseError);
      }
    }
    expect(() => decodeLinkPackets(p.subarray(0, 10))).toThrow(NetlinkParseError);
  });
});
