// Hostname lookups through a namespace's own resolver (real c-ares, real UDP
// to a DNS server inside the test's namespace): TTLs, IPv6, NXDOMAIN,
// SERVFAIL, no answer, a truncated answer, garbage and an answer cut short,
// the name/address bounds, and a resolv.conf without a nameserver.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lookupHostnamesIn } from '../../src/cluster/dns/lookup-netns.js';
import { type DnsServer, startDns } from '../support/dns-lab.js';
import { isRoot, Netns } from '../support/netns.js';

describe.skipIf(!isRoot)('lookups with the namespace resolver (real DNS over UDP)', () => {
  let ns: Netns;
  let dns: DnsServer;
  beforeAll(async () => {
    ns = Netns.create('cbd2-');
    dns = await startDns(ns, '127.0.0.1', {
      'nlb.example.test': {
        A: [
          ['10.0.50.10', 60],
          ['10.0.51.10', 30],
        ],
        AAAA: [['fd00:50::10', 45]],
      },
      'v6only.example.test': { AAAA: [['fd00:50::11', 20]] },
      'servfail.example.test': { rcode: 2 },
      'drop.example.test': { mode: 'drop' },
      'tc.example.test': { mode: 'truncated' },
      'garbage.example.test': { mode: 'garbage' },
      'cut.example.test': { A: [['10.0.50.12', 60]], mode: 'cut' },
      'many.example.test': { A: Array.from({ length: 40 }, (_, i): [string, number] => [`10.1.0.${i + 1}`, 300]) },
    });
    dns.serve(ns, '127.0.0.1');
  }, 30_000);
  afterAll(() => {
    dns?.stop();
    ns?.delete();
  });

  it('gives every record with its TTL, and a reason for each failure', async () => {
    const names = [
      'nlb.example.test',
      'v6only.example.test',
      'nx.example.test',
      'servfail.example.test',
      'drop.example.test',
      'tc.example.test',
      'garbage.example.test',
      'cut.example.test',
      'bad name',
    ];
    const t0 = Date.now();
    const r = await lookupHostnamesIn(ns.path, names, { timeoutMs: 3000 });
    expect(Date.now() - t0).toBeLessThan(12_000);
    expect(r.resolver).toBe('nameserver 127.0.0.1 (/etc/resolv.conf)');
    const by = new Map(r.results.map((x) => [x.hostname, x]));
    expect(by.get('nlb.example.test')).toEqual({
      hostname: 'nlb.example.test',
      addresses: [
        { ip: '10.0.50.10', ttl: 60 },
        { ip: '10.0.51.10', ttl: 30 },
        { ip: 'fd00:50::10', ttl: 45 },
      ],
    });
    expect(by.get('v6only.example.test')!.addresses).toEqual([{ ip: 'fd00:50::11', ttl: 20 }]);
    expect(by.get('nx.example.test')).toMatchObject({ addresses: [], error: 'NXDOMAIN (name does not exist)' });
    expect(by.get('servfail.example.test')).toMatchObject({ addresses: [], error: 'SERVFAIL from the nameserver' });
    expect(by.get('drop.example.test')!.error).toMatch(/^timeout/);
    // TC without records: c-ares retries over TCP, which nothing answers here.
    expect(by.get('tc.example.test')!.addresses).toEqual([]);
    expect(by.get('tc.example.test')!.error).toBeTruthy();
    expect(by.get('garbage.example.test')!.addresses).toEqual([]);
    expect(by.get('garbage.example.test')!.error).toBeTruthy();
    expect(by.get('cut.example.test')!.addresses).toEqual([]);
    expect(by.get('cut.example.test')!.error).toBeTruthy();
    expect(by.get('bad name')).toMatchObject({ addresses: [], error: 'not a valid DNS name (never sent)' });
  }, 30_000);

  it('bounds the addresses per name and the names per round', async () => {
    const r = await lookupHostnamesIn(ns.path, ['many.example.test', 'nlb.example.test', 'v6only.example.test'], {
      maxNames: 2,
      maxAddresses: 16,
    });
    expect(r.results[0]!.addresses).toHaveLength(16);
    expect(r.results[1]!.addresses.length).toBeGreaterThan(0);
    expect(r.results[2]).toMatchObject({
      hostname: 'v6only.example.test',
      addresses: [],
      error: expect.stringContaining('more than 2'),
    });
  }, 30_000);

  it('says when the namespace has no nameserver, for every name', async () => {
    const other = Netns.create('cbd2-');
    try {
      mkdirSync(`/etc/netns/${other.name}`, { recursive: true });
      writeFileSync(`/etc/netns/${other.name}/resolv.conf`, 'search example.test\n');
      const r = await lookupHostnamesIn(other.path, ['nlb.example.test']);
      expect(r.error).toBe('no nameserver in /etc/resolv.conf');
      expect(r.results).toEqual([
        { hostname: 'nlb.example.test', addresses: [], error: 'no nameserver in /etc/resolv.conf' },
      ]);
    } finally {
      rmSync(`/etc/netns/${other.name}`, { recursive: true, force: true });
      other.delete();
    }
  }, 30_000);
});
