import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BundleParseError } from '../../../src/bundle/errors.js';
import { parseConntrackLine, parseConntrackText } from '../../../src/bundle/parse-conntrack.js';
import { formatConntrack } from '../../../src/kernel/conntrack/format.js';

const TEXT = join(import.meta.dirname, '../../fixtures/text');
const read = (f: string): string => readFileSync(join(TEXT, f), 'utf8');
const lines = (f: string): string[] =>
  read(f)
    .split('\n')
    .filter((l) => l.trim() !== '');

describe('conntrack text parser on outputs captured in a netns (test/fixtures/text/capture.sh)', () => {
  it('round-trips every `conntrack -L -o extended,id` line through the conntrack -L formatter', () => {
    const src = lines('conntrack-L-extended-id.txt');
    const { entries, warnings } = parseConntrackText(src.join('\n'), 'conntrack-L-extended-id.txt');
    expect(warnings).toEqual([]);
    expect(entries).toHaveLength(src.length);
    entries.forEach((e, i) => expect(formatConntrack(e, { extended: true, id: true })).toBe(src[i]!.trim()));
  });

  it("keeps an SCTP entry's state, printed where conntrack -L prints it", () => {
    const line =
      'sctp     132 431999 ESTABLISHED src=10.244.1.10 dst=192.0.2.10 sport=5000 dport=80 ' +
      'src=192.0.2.10 dst=10.244.1.10 sport=80 dport=5000 [ASSURED] mark=0 use=1';
    const { entries, warnings } = parseConntrackText(line, 'conntrack.txt');
    expect(warnings).toEqual([]);
    expect(entries[0]).toMatchObject({ sctpState: 'ESTABLISHED' });
    expect(entries[0]!.tcpState).toBeUndefined();
    expect(formatConntrack(entries[0]!)).toBe(line);
  });

  it('round-trips plain `conntrack -L` and `-o extended` lines', () => {
    for (const [f, extended] of [
      ['conntrack-L.txt', false],
      ['conntrack-L-extended.txt', true],
    ] as const) {
      const src = lines(f);
      const { entries } = parseConntrackText(src.join('\n'), f);
      expect(entries.map((e) => formatConntrack(e, { extended }))).toEqual(src.map((l) => l.trim()));
    }
  });

  it('reads /proc/net/nf_conntrack: full IPv6 forms canonicalised, zone=0 and use kept, same flows as conntrack -L', () => {
    const proc = parseConntrackText(read('proc-nf_conntrack.txt'), 'proc-nf_conntrack.txt');
    const ct = parseConntrackText(read('conntrack-L-extended.txt'), 'conntrack-L-extended.txt');
    const key = (e: (typeof proc.entries)[number]): string =>
      JSON.stringify([e.orig, e.reply, e.tcpState, e.statusFlags, e.zone]);
    expect(proc.warnings).toEqual([]);
    expect(proc.entries.map(key).sort()).toEqual(ct.entries.map(key).sort());
    const v6 = proc.entries.find((e) => e.orig.dst === 'fd77::50')!;
    expect(v6.orig.src).toBe('fd00:244:1::5');
    expect(v6.use).toBe(2);
  });

  it('decodes tuples, states, flags, NAT, zone, mark, counters and ids as conntrack prints them', () => {
    const { entries } = parseConntrackText(read('conntrack-L-extended-id.txt'), 'x');
    const byDst = (dst: string, dport?: number) =>
      entries.find((e) => e.orig.dst === dst && (dport === undefined || e.orig.dport === dport))!;
    // The L4-loop outbound leg: untranslated, unreplied.
    const out = byDst('203.0.113.50', 80);
    expect(out).toMatchObject({ family: 4, proto: 'tcp', tcpState: 'SYN_SENT', zone: 0, mark: 0, use: 1 });
    expect(out.orig).toEqual({ src: '10.244.1.5', dst: '203.0.113.50', protoNum: 6, sport: 40000, dport: 80 });
    expect(out.statusFlags).toEqual(['CONFIRMED']);
    expect(out.id).toBeGreaterThan(0);
    // DNAT without SNAT (ETP=Local shape).
    expect(byDst('203.0.113.51').statusFlags).toEqual(['SEEN_REPLY', 'CONFIRMED', 'DST_NAT']);
    // DNAT + masquerade, with a mark.
    const dns = byDst('10.96.0.10');
    expect(dns.statusFlags).toEqual(['SEEN_REPLY', 'ASSURED', 'CONFIRMED', 'SRC_NAT', 'DST_NAT']);
    expect(dns.mark).toBe(0x4000);
    expect(dns.reply).toEqual({ src: '10.244.2.9', dst: '10.77.0.2', protoNum: 17, sport: 53, dport: 61000 });
    // Source == destination == VIP in zone 7.
    const vip = entries.find((e) => e.orig.src === '203.0.113.50')!;
    expect(vip.zone).toBe(7);
    // Real traffic: counters of the connection kept open, ICMP ids.
    const est = entries.find((e) => e.orig.dport === 8080 && e.tcpState === 'ESTABLISHED')!;
    expect(est.origCounters?.packets).toBeGreaterThan(0);
    const icmp = entries.find((e) => e.proto === 'icmp')!;
    expect(icmp.orig).toMatchObject({ icmpType: 8, icmpCode: 0 });
    expect(icmp.orig.icmpId).toBe(icmp.reply.icmpId);
    expect(icmp.id).not.toBe(icmp.orig.icmpId);
    const igmp = entries.find((e) => e.proto === 'unknown')!;
    expect(igmp.orig).toEqual({ src: '10.244.1.1', dst: '224.0.0.22', protoNum: 2 });
  });

  it("takes conntrack's summary line (stderr saved with the output) and checks the count", () => {
    const r = parseConntrackText(read('conntrack-L-with-summary.txt'), 'c.txt');
    expect(r.reportedCount).toBe(14);
    expect(r.entries).toHaveLength(14);
    expect(r.warnings).toEqual([]);
    const cut = read('conntrack-L-with-summary.txt').split('\n').slice(0, 6).join('\n');
    const t = parseConntrackText(cut, 'c.txt');
    expect(t.warnings).toEqual(['c.txt: conntrack reported 14 entries but the file holds 5: truncated?']);
  });

  it('skips a truncated line with a warning naming file and line, keeping the rest', () => {
    const src = lines('conntrack-L-extended.txt');
    const n = src.findIndex((l) => l.includes('ESTABLISHED') && l.includes('packets=2'));
    const line = src[n]!;
    // Cuts inside the original tuple, before the reply tuple, inside it, and inside "mark=".
    const cuts = [
      line.indexOf('dport=') + 3,
      line.indexOf('packets='),
      line.lastIndexOf('sport='),
      line.indexOf('mark=') + 2,
    ];
    for (const cut of cuts) {
      const text = [...src.slice(0, n), line.slice(0, cut), ...src.slice(n + 1)].join('\n');
      const r = parseConntrackText(text, 'bundle/conntrack.txt');
      expect(r.entries).toHaveLength(src.length - 1);
      expect(r.warnings).toHaveLength(1);
      expect(r.warnings[0]).toMatch(new RegExp(`^bundle/conntrack\\.txt:${n + 1}: line skipped: `));
    }
  });

  it('explains malformed lines', () => {
    const bad = (l: string): string => {
      try {
        parseConntrackLine(l);
      } catch (e) {
        return (e as Error).message;
      }
      return 'parsed';
    };
    expect(bad('tcp 6 10 ESTABLISHED src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2')).toMatch(/no reply tuple/);
    expect(
      bad('tcp 6 10 ESTABLISHED src=10.0.0.1 dst=10.0.0.999 sport=1 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1'),
    ).toMatch(/dst="10.0.0.999" is not an IP/);
    expect(bad('tcp 6 ten ESTABLISHED')).toMatch(/timeout "ten"/);
    expect(bad('ipv4 10 tcp 6 10 src=10.0.0.1')).toMatch(/expected 2/);
    expect(
      bad('tcp 6 10 SYN_SENT src=10.0.0.1 dst=10.0.0.2 sport=1 dport=99999 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1'),
    ).toMatch(/dport "99999"/);
    expect(bad('tcp 6 10 SYN_SENT src=10.0.0.1 dst=10.0.0.2 src=10.0.0.2 dst=10.0.0.1 mark=0')).toMatch(
      /original tuple without sport/,
    );
    expect(
      bad('tcp 6 10 SYN_SENT src=10.0.0.1 dst=fd00::2 sport=1 dport=2 src=fd00::2 dst=10.0.0.1 sport=2 dport=1'),
    ).toMatch(/mix IPv4 and IPv6/);
    expect(
      bad('udp 17 10 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1 mark=0 use'),
    ).toMatch(/unexpected "use"/);
  });

  it('rejects a file that is not conntrack output at all, naming file and line', () => {
    expect(() => parseConntrackText('\n# saved by hand\nhello world\nfoo\n', 'bundle/conntrack.txt')).toThrow(
      BundleParseError,
    );
    expect(() => parseConntrackText('\nhello world\n', 'bundle/conntrack.txt')).toThrow(
      /^bundle\/conntrack\.txt:2: not conntrack -L/,
    );
    expect(parseConntrackText('', 'empty').entries).toEqual([]);
  });

  it('reports an error message of conntrack saved in the file', () => {
    const r = parseConntrackText(
      'conntrack v1.4.7 (conntrack-tools): Operation failed: Operation not permitted\n',
      'c.txt',
    );
    expect(r.entries).toEqual([]);
    expect(r.warnings[0]).toBe('c.txt:1: conntrack reported: Operation failed: Operation not permitted');
  });

  it('accepts CRLF line ends', () => {
    const r = parseConntrackText(read('conntrack-L.txt').replaceAll('\n', '\r\n'), 'c.txt');
    expect(r.warnings).toEqual([]);
    expect(r.entries).toHaveLength(lines('conntrack-L.txt').length);
  });
});
