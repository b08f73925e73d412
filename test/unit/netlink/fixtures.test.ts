// Decoding real captured kernel replies (test/fixtures/netlink, recorded by
// record.ts), and every truncated or corrupted variant of them: a clear
// NetlinkParseError, never another exception, never a hang.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeTcmsg } from '../../../src/capture/tc-cleanup.js';
import { decodeAddress, decodeLink } from '../../../src/kernel/addresses.js';
import { decodeEntry } from '../../../src/kernel/conntrack/decode.js';
import { formatConntrack } from '../../../src/kernel/conntrack/format.js';
import { NetlinkParseError, NLMSG_DONE, splitMessages, walkAttrs } from '../../../src/kernel/netlink/codec.js';

const dir = join(import.meta.dirname, '../../fixtures/netlink');
const datagrams = (name: string): Buffer[] =>
  readFileSync(join(dir, name), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((h) => Buffer.from(h, 'hex'));
const messages = (name: string) =>
  datagrams(name)
    .flatMap((d) => splitMessages(d))
    .filter((m) => m.type !== NLMSG_DONE);

/** Runs decode on every prefix and on single-byte corruptions; only NetlinkParseError may escape. */
function fuzz(payload: Buffer, decode: (p: Buffer) => unknown): { errors: number } {
  let errors = 0;
  const attempt = (p: Buffer): void => {
    try {
      decode(p);
    } catch (e) {
      if (!(e instanceof NetlinkParseError)) throw new Error(`non-parse error ${String(e)} for ${p.toString('hex')}`);
      errors++;
    }
  };
  for (let cut = 0; cut < payload.length; cut++) attempt(payload.subarray(0, cut));
  for (let i = 0; i < payload.length; i++) {
    for (const v of [0x00, 0xff, 0x03, 0x41]) {
      const p = Buffer.from(payload);
      p[i] = v;
      attempt(p);
    }
  }
  return { errors };
}

describe('rtnetlink fixtures', () => {
  it('decodes links and addresses exactly as ip -j -d addr shows them', () => {
    const ip = JSON.parse(readFileSync(join(dir, 'ip-addr.json'), 'utf8')) as {
      ifindex: number;
      ifname: string;
      linkinfo?: { info_kind: string };
      addr_info: { local: string; prefixlen: number; scope: string }[];
    }[];
    const links = messages('rtm-getlink.hex').map((m) => decodeLink(m.payload));
    const addrs = messages('rtm-getaddr.hex').map((m) => decodeAddress(m.payload));
    expect(links.map((l) => [l.index, l.name, l.kind])).toEqual(
      ip.map((l) => [l.ifindex, l.ifname, l.linkinfo?.info_kind]),
    );
    for (const l of ip) {
      const ours = addrs
        .filter((a) => a.ifindex === l.ifindex)
        .map((a) => `${a.address.address}/${a.address.prefixLen} ${a.address.scope}`);
      expect(ours.sort()).toEqual(l.addr_info.map((x) => `${x.local}/${x.prefixlen} ${x.scope}`).sort());
    }
    expect(links.find((l) => l.isKubeIpvs)?.name).toBe('kube-ipvs0');
  });

  it('turns every truncation and corruption into a NetlinkParseError', () => {
    for (const m of messages('rtm-getlink.hex').slice(0, 3))
      expect(fuzz(m.payload, decodeLink).errors).toBeGreaterThan(0);
    for (const m of messages('rtm-getaddr.hex')) expect(fuzz(m.payload, decodeAddress).errors).toBeGreaterThan(0);
  });

  it('rejects a datagram whose message header claims more than it holds', () => {
    const d = datagrams('rtm-getaddr.hex')[0]!;
    expect(() => splitMessages(d.subarray(0, d.length - 3))).toThrow(NetlinkParseError);
    expect(() => splitMessages(d.subarray(0, 10))).toThrow(/truncated header/);
  });
});

describe('ctnetlink fixtures', () => {
  it('decodes to the very lines conntrack -L -o extended,id printed (timeouts aside)', () => {
    const strip = (l: string): string => l.replace(/^(ipv[46]\s+\d+\s+\S+\s+\d+\s+)\d+/, '$1T');
    const want = readFileSync(join(dir, 'conntrack-L.txt'), 'utf8').split('\n').filter(Boolean).map(strip).sort();
    const got = messages('ctnetlink-dump.hex').map((m) =>
      strip(formatConntrack(decodeEntry(m.payload), { extended: true, id: true })),
    );
    expect(got.sort()).toEqual(want);
  });

  it('turns every truncation and corruption into a NetlinkParseError', () => {
    for (const m of messages('ctnetlink-dump.hex')) expect(fuzz(m.payload, decodeEntry).errors).toBeGreaterThan(0);
  });

  it('walks nested attributes and stops at an overrun', () => {
    const m = messages('ctnetlink-dump.hex')[0]!;
    const types: number[] = [];
    walkAttrs(m.payload, 4, m.payload.length, (t) => types.push(t));
    expect(types).toContain(1); // CTA_TUPLE_ORIG
    const bad = Buffer.from(m.payload);
    bad.writeUInt16LE(0xfff0, 4); // first attribute claims 65k bytes
    expect(() => walkAttrs(bad, 4, bad.length, () => {})).toThrow(/overruns its container/);
  });
});

describe('tc fixtures', () => {
  /** tc's `maj:min` handle text (hex) as the 32-bit number the kernel sends. */
  const tcHandle = (text: string): number => {
    const [maj = '0', min = '0'] = text.split(':');
    return ((Number.parseInt(maj || '0', 16) << 16) | Number.parseInt(min || '0', 16)) >>> 0;
  };

  it('decodes the qdisc dump as tc -j qdisc show printed it', () => {
    const tc = JSON.parse(readFileSync(join(dir, 'tc-qdisc.json'), 'utf8')) as {
      kind: string;
      handle: string;
      parent?: string;
    }[];
    // The kernel dumps every interface's qdiscs whatever the request's ifindex; tc printed one interface's.
    const all = messages('rtm-getqdisc.hex').map((m) => decodeTcmsg(m.payload));
    const clsact = all.find((q) => q.kind === 'clsact')!;
    const got = all.filter((q) => q.ifindex === clsact.ifindex);
    expect(got.map((q) => [q.kind, q.handle])).toEqual(tc.map((q) => [q.kind, tcHandle(q.handle)]));
    expect(clsact.parent).toBe(tcHandle(tc.find((q) => q.kind === 'clsact')!.parent!));
  });

  it('decodes the filter dump of the ingress hook: one message per filter node tc printed', () => {
    const tc = JSON.parse(readFileSync(join(dir, 'tc-filter.json'), 'utf8')) as { kind: string }[];
    const got = messages('rtm-gettfilter.hex').map((m) => decodeTcmsg(m.payload));
    expect(got.map((f) => f.kind)).toEqual(tc.map((f) => f.kind));
    expect(got.every((f) => f.parent === 0xfffffff2)).toBe(true);
  });

  it('turns every truncation and corruption into a NetlinkParseError', () => {
    for (const name of ['rtm-getqdisc.hex', 'rtm-gettfilter.hex'])
      for (const m of messages(name)) expect(fuzz(m.payload, decodeTcmsg).errors).toBeGreaterThan(0);
  });
});
