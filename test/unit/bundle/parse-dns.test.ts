// dns-lookups.json, the dns source's bundle file: the captured collect outputs of the dns-loop lab
// (test/fixtures/dns/README.md), truncated at every byte and malformed item by item, then read back
// through readBundle, where the answers become the hostname-only Service's LB addresses.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BundleFiles } from '../../../src/bundle/files.js';
import { formatDnsLookups, MAX_LOOKUP_ADDRESSES, parseDnsLookups } from '../../../src/bundle/parse-dns.js';
import type { HostnameLookup } from '../../../src/model/hostname-lookup.js';
import { readBundle } from '../../../src/source/bundle-read.js';
import { dns } from '../../../src/source/dns.js';

const FX = join(import.meta.dirname, '../../fixtures');
const OK = readFileSync(join(FX, 'dns/dns-lookups.lab.json'), 'utf8');
const SERVFAIL = readFileSync(join(FX, 'dns/dns-lookups.lab-servfail.json'), 'utf8');
const NAME = 'k8s-lab-web-0a1b2c3d4e-0123456789abcdef.elb.eu-west-1.amazonaws.com';
const line = (text: string): string => text.split('\n').find((l) => l.startsWith('{"hostname"'))!;
/** The two captured lookups in one file, the second under another name. */
const TWO = OK.replace(line(OK), `${line(OK)},\n${line(SERVFAIL).replace(NAME, `b-${NAME}`)}`);

const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

describe('parseDnsLookups', () => {
  it('reads the captured answer and the captured SERVFAIL', () => {
    expect(parseDnsLookups(OK, 'f')).toEqual({
      lookups: [
        {
          hostname: NAME,
          addresses: ['10.0.100.100'],
          ttlS: 5,
          resolvedAt: expect.any(String),
          resolver: 'nameserver 10.0.1.1 (/etc/resolv.conf)',
        },
      ],
      warnings: [],
    });
    expect(parseDnsLookups(SERVFAIL, 'f').lookups).toEqual([
      {
        hostname: NAME,
        addresses: [],
        error: 'SERVFAIL from the nameserver',
        resolver: 'nameserver 10.0.1.1 (/etc/resolv.conf)',
      },
    ]);
  });

  it('writes what it reads (the collect side)', () => {
    const { lookups } = parseDnsLookups(TWO, 'f');
    expect(lookups.map((l) => l.hostname)).toEqual([NAME, `b-${NAME}`]);
    expect(parseDnsLookups(formatDnsLookups(lookups), 'f')).toEqual({ lookups, warnings: [] });
  });

  it('a file cut at any byte: a clear error or every complete lookup, with a warning; never a crash', () => {
    const first = line(TWO);
    for (let n = 0; n < TWO.length - 1; n++) {
      const cut = TWO.slice(0, n);
      let r: ReturnType<typeof parseDnsLookups> | undefined;
      try {
        r = parseDnsLookups(cut, 'dns-lookups.json');
      } catch (e) {
        expect((e as Error).message, `cut at ${n}`).toMatch(/^dns-lookups\.json: (not JSON|no "lookups" list)/);
        // Nothing complete yet: the first lookup's line is not whole.
        expect(cut.includes(`${first},`) || (cut.endsWith(first) && n > 0), `cut at ${n}`).toBe(false);
        continue;
      }
      expect(r.lookups[0]?.hostname, `cut at ${n}`).toBe(NAME);
      if (n < TWO.length - 2)
        expect(r.warnings.join(), `cut at ${n}`).toMatch(
          /not complete JSON \(cut short\?\): read the [12] complete lookup line/,
        );
    }
  });

  it('malformed items: each refused with its index, the others kept', () => {
    const good = JSON.parse(line(OK)) as HostnameLookup;
    const text = JSON.stringify({
      format: 'clbprobe-dns-lookups/1',
      lookups: [
        null,
        7,
        { hostname: 5 },
        {
          ...good,
          hostname: 'a.example',
          addresses: ['10.0.0.1', 'not-an-ip', 'fe80::1%eth0', 12, '2001:db8::1'],
          ttlS: -1,
          resolvedAt: 'yesterday',
          error: {},
        },
        good,
        { ...good, addresses: ['10.9.9.9'] },
        { hostname: 'b.example', resolver: 'r' },
        {
          ...good,
          hostname: 'c.example',
          addresses: Array.from({ length: MAX_LOOKUP_ADDRESSES + 5 }, (_, i) => `10.1.${i >> 8}.${i & 255}`),
        },
      ],
    });
    const r = parseDnsLookups(text, 'f');
    expect(r.lookups.map((l) => l.hostname)).toEqual(['a.example', NAME, 'b.example', 'c.example']);
    expect(r.lookups[0]).toEqual({
      hostname: 'a.example',
      addresses: ['10.0.0.1', '2001:db8::1'],
      resolver: good.resolver,
    });
    expect(r.lookups[1]!.addresses).toEqual(['10.0.100.100']);
    expect(r.lookups[2]).toEqual({
      hostname: 'b.example',
      addresses: [],
      resolver: 'r',
      error: 'no address in the bundle',
    });
    expect(r.lookups[3]!.addresses).toHaveLength(MAX_LOOKUP_ADDRESSES);
    expect(r.warnings).toEqual([
      'f: lookups[0]: not an object; skipped',
      'f: lookups[1]: not an object; skipped',
      'f: lookups[2]: no hostname; skipped',
      'f: lookups[3]: a.example: "not-an-ip" is not an IP address; skipped',
      'f: lookups[3]: a.example: "fe80::1%eth0" is not an IP address; skipped',
      'f: lookups[3]: a.example: 12 is not an IP address; skipped',
      'f: lookups[3]: a.example: ttlS -1 is not a number of seconds; ignored',
      'f: lookups[3]: a.example: resolvedAt is not a time; ignored',
      'f: lookups[3]: a.example: error is not text; ignored',
      `f: lookups[5]: ${NAME} listed again; the first kept`,
      'f: lookups[6]: b.example: no "addresses" list; read as none',
      `f: lookups[7]: c.example: ${MAX_LOOKUP_ADDRESSES + 5} addresses, the first ${MAX_LOOKUP_ADDRESSES} kept`,
    ]);
  });

  it('not JSON, no list, another format: clear errors and warnings', () => {
    expect(() => parseDnsLookups('', 'f')).toThrow(/^f: not JSON/);
    expect(() => parseDnsLookups('<html>', 'f')).toThrow(/^f: not JSON/);
    expect(() => parseDnsLookups('{}', 'f')).toThrow('f: no "lookups" list');
    expect(() => parseDnsLookups('null', 'f')).toThrow('f: no "lookups" list');
    expect(parseDnsLookups(OK.replace('clbprobe-dns-lookups/1', 'other/9'), 'f').warnings).toEqual([
      'f: format "other/9", not clbprobe-dns-lookups/1: read as far as it matches',
    ]);
  });
});

describe('the dns source in a bundle', () => {
  const bundleWith = (files: Record<string, string>): string => {
    const dir = mkdtempSync(join(tmpdir(), 'cbka-bundle-'));
    dirs.push(dir);
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    return dir;
  };
  const hostnameCluster = (): string => readFileSync(join(FX, 'bundles/aws-nlb-hostname/cluster.json'), 'utf8');

  it('fromBundle: up with the answers, down naming the SERVFAIL, absent without the file', () => {
    const read = (files: Record<string, string>) => {
      const dir = bundleWith(files);
      return dns.fromBundle!(new BundleFiles(dir, Object.keys(files)));
    };
    expect(read({ 'dns-lookups.json': OK })).toMatchObject({ state: 'up', value: { lookups: [{ hostname: NAME }] } });
    expect(read({ 'dns-lookups.json': SERVFAIL })).toMatchObject({
      state: 'down',
      reason: `1 of 1 LB hostnames not resolved by nameserver 10.0.1.1 (/etc/resolv.conf): ${NAME}: SERVFAIL from the nameserver`,
      value: { lookups: [{ hostname: NAME, addresses: [] }] },
    });
    expect(read({})).toMatchObject({
      state: 'absent',
      reason: expect.stringContaining('dns-lookups.json not in the bundle'),
    });
  });

  it("readBundle gives the hostname-only Services the bundle's addresses; unanswered names leave dns down", () => {
    const names = [...hostnameCluster().matchAll(/"hostname": "([^"]+elb[^"]+)"/g)].map((m) => m[1]!);
    expect(names.length).toBe(4);
    const lookups: HostnameLookup[] = names.slice(0, 3).map((hostname, i) => ({
      hostname,
      addresses: [`10.0.50.${10 + i}`],
      ttlS: 60,
      resolver: 'nameserver 10.96.0.10 (/etc/resolv.conf)',
    }));
    const r = readBundle(
      bundleWith({ 'cluster.json': hostnameCluster(), 'dns-lookups.json': formatDnsLookups(lookups) }),
      { nodeName: 'node-a' },
    );
    const svc = r.cluster!.services.find((s) => s.lbHostnames?.includes(names[0]!))!;
    expect(svc.lbIngress).toContainEqual({
      ip: '10.0.50.10',
      ipMode: 'VIP',
      hostname: names[0],
      resolvedFrom: names[0],
    });
    expect(svc.lbHostnameLookups).toEqual([lookups[0]]);
    const esc = (x: string) => x.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const status = r.node.sources.find((s) => s.source === 'dns');
    expect(status?.available).toBe(false);
    expect(status?.reason).toMatch(
      new RegExp(
        `^1 of 4 hostname-only LB names not answered \\(${esc(names[3]!)}\\): .*dns-lookups\\.json has no answer for them$`,
      ),
    );

    // A bundle made by hand has no answers at all: every name unknown, and why.
    const none = readBundle(bundleWith({ 'cluster.json': hostnameCluster() }), { nodeName: 'node-a' });
    expect(none.node.sources.find((s) => s.source === 'dns')).toEqual({
      source: 'dns',
      available: false,
      reason: expect.stringMatching(
        /^4 of 4 hostname-only LB names not answered \(.*, \.\.\.\): dns-lookups\.json not in the bundle/,
      ),
    });
    expect(
      none.cluster!.services.find((s) => s.lbHostnames?.includes(names[0]!))!.lbIngress.some((i) => i.resolvedFrom),
    ).toBe(false);
  });
});
