// The pieces of hostname-only LB support that need no network: resolv.conf,
// the TTL cache, the view with resolved addresses, and what the annotations
// say about the LB's handling of client addresses.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { HostnameCache } from '../../../src/cluster/dns/hostname-cache.js';
import { isHostname, type LookupRound } from '../../../src/cluster/dns/lookup.js';
import { parseResolvConf, ResolvConfError } from '../../../src/cluster/dns/resolv-conf.js';
import { loadClusterFile } from '../../../src/cluster/file.js';
import { lbClientAddress } from '../../../src/cluster/lb-client-address.js';
import { lbHostnamesOf, withLbHostnames } from '../../../src/cluster/lb-hostnames.js';

const FIX = new URL('../../fixtures/', import.meta.url).pathname;
const read = (f: string): string => readFileSync(`${FIX}dns/${f}`, 'utf8');

describe('parseResolvConf', () => {
  it('reads the captured and the kubelet-written files', () => {
    expect(parseResolvConf(read('resolv.conf.dev-host'))).toMatchObject({
      nameservers: ['10.255.255.53'],
      timeoutS: 5,
      attempts: 2,
      warnings: [],
    });
    expect(parseResolvConf(read('resolv.conf.kubelet-cluster-first'))).toMatchObject({
      nameservers: ['10.96.0.10'],
      warnings: [],
    });
    expect(parseResolvConf(read('resolv.conf.systemd-stub'))).toMatchObject({
      nameservers: ['127.0.0.53'],
      warnings: [],
    });
  });

  it('keeps options within bounds, and says what it skipped', () => {
    const c = parseResolvConf(
      'nameserver 10.0.0.2\nnameserver fe80::1%eth0\nnameserver bogus\nnameserver 10.0.0.3\nnameserver 10.0.0.4\noptions timeout:0 attempts:99 rotate\n',
      'x',
    );
    expect(c.nameservers).toEqual(['10.0.0.2', 'fe80::1%eth0', '10.0.0.3']);
    expect(c.timeoutS).toBe(1);
    expect(c.attempts).toBe(5);
    expect(c.warnings).toEqual([
      'x:3: nameserver "bogus" is not an IP address',
      'x:5: nameserver 10.0.0.4 ignored (only the first 3 are used)',
    ]);
  });

  it('truncated, empty, binary and oversized input: warnings or a clear error, never a crash', () => {
    const text = read('resolv.conf.kubelet-cluster-first');
    for (let n = 0; n < text.length; n++) expect(() => parseResolvConf(text.slice(0, n))).not.toThrow();
    // Cut inside the address: the partial one is named, never used.
    const cut = parseResolvConf(text.slice(0, text.indexOf('10.96.0.10') + 5), 'f');
    expect(cut.nameservers).toEqual([]);
    expect(cut.warnings).toEqual(['f:2: nameserver "10.96" is not an IP address', 'f: no usable nameserver line']);
    expect(parseResolvConf('').warnings).toEqual(['resolv.conf: no usable nameserver line']);
    expect(parseResolvConf('\u0000\u00ff\ufffd nameserver\n').nameservers).toEqual([]);
    expect(() => parseResolvConf('#'.repeat(70_000))).toThrow(ResolvConfError);
  });
});

describe('isHostname', () => {
  it('accepts LB names and refuses what must never be sent', () => {
    expect(isHostname('k8s-shop-nlb-0a1b2c3d4e-0123456789abcdef.elb.eu-west-1.amazonaws.com')).toBe(true);
    expect(isHostname('lb.example.com.')).toBe(true);
    for (const bad of [
      '',
      '.',
      'a..b',
      '-a.com',
      'a b.com',
      `${'a'.repeat(64)}.com`,
      `${'a.'.repeat(127)}com`,
      'x\u0000.com',
    ])
      expect(isHostname(bad), bad).toBe(false);
  });
});

const round = (results: LookupRound['results']): LookupRound => ({
  resolver: 'nameserver 10.0.0.2 (test)',
  results,
  warnings: [],
});

describe('HostnameCache', () => {
  it('re-asks when the shortest TTL runs out, within the floor and the ceiling', () => {
    const c = new HostnameCache({ minTtlS: 5, maxTtlS: 300 });
    expect(c.want(['a.example', 'b.example', 'z.example'])).toBe(true);
    expect(c.due(0).sort()).toEqual(['a.example', 'b.example', 'z.example']);
    expect(
      c.record(
        round([
          {
            hostname: 'a.example',
            addresses: [
              { ip: '10.0.0.9', ttl: 60 },
              { ip: '10.0.0.8', ttl: 30 },
            ],
          },
          { hostname: 'b.example', addresses: [{ ip: '10.0.1.1', ttl: 0 }] },
          { hostname: 'z.example', addresses: [{ ip: '10.0.2.1', ttl: 86400 }] },
        ]),
        1000,
      ),
    ).toBe(true);
    expect(c.lookups().get('a.example')).toMatchObject({ addresses: ['10.0.0.8', '10.0.0.9'], ttlS: 30 });
    expect(c.due(1000 + 4999)).toEqual([]);
    expect(c.due(1000 + 5000)).toEqual(['b.example']);
    expect(c.due(1000 + 30_000).sort()).toEqual(['a.example', 'b.example']);
    expect(c.due(1000 + 300_000)).toContain('z.example');
    expect(c.nextDueIn(1000)).toBe(5000);
    // The same answer again with another TTL changes nothing downstream.
    expect(c.record(round([{ hostname: 'b.example', addresses: [{ ip: '10.0.1.1', ttl: 7 }] }]), 6000)).toBe(false);
  });

  it('keeps the last addresses, marked with the error, for a while after a failure; then drops them', () => {
    const c = new HostnameCache({ retryS: 10, keepStaleS: 60 });
    c.want(['a.example']);
    c.record(round([{ hostname: 'a.example', addresses: [{ ip: '10.0.0.9', ttl: 30 }] }]), 0);
    expect(
      c.record(round([{ hostname: 'a.example', addresses: [], error: 'SERVFAIL from the nameserver' }]), 30_000),
    ).toBe(true);
    expect(c.lookups().get('a.example')).toMatchObject({
      addresses: ['10.0.0.9'],
      error: 'SERVFAIL from the nameserver',
      ttlS: 30,
    });
    expect(c.due(39_999)).toEqual([]);
    expect(c.due(40_000)).toEqual(['a.example']);
    c.record(round([{ hostname: 'a.example', addresses: [], error: 'SERVFAIL from the nameserver' }]), 91_000);
    expect(c.lookups().get('a.example')).toMatchObject({ addresses: [], error: 'SERVFAIL from the nameserver' });
  });

  it('forgets names the cluster no longer publishes, bounds how many it tracks, ignores answers for others', () => {
    const c = new HostnameCache({ maxNames: 2 });
    c.want(['a', 'b', 'c']);
    expect(c.due(0)).toEqual(['a', 'b']);
    expect(c.record(round([{ hostname: 'other', addresses: [{ ip: '10.0.0.1', ttl: 5 }] }]), 0)).toBe(false);
    expect(c.want(['b'])).toBe(true);
    expect(c.want(['b'])).toBe(false);
    expect(c.due(0)).toEqual(['b']);
  });
});

describe('withLbHostnames', () => {
  const view = loadClusterFile(`${FIX}bundles/aws-nlb-hostname/cluster.json`, { nodeName: 'node-a' });
  const nlb = 'k8s-shop-nlb-0a1b2c3d4e-0123456789abcdef.elb.eu-west-1.amazonaws.com';

  it('lists the hostname-only names, and adds their addresses as resolved LB ingress IPs', () => {
    expect(lbHostnamesOf(view)).toHaveLength(4);
    const l = { hostname: nlb, addresses: ['10.0.50.10', '10.0.51.10'], ttlS: 60, resolver: 'r' };
    const out = withLbHostnames(view, new Map([[nlb, l]]));
    const s = out.services.find((x) => x.name === 'nlb')!;
    expect(s.lbIngress).toEqual([
      { ip: '10.0.50.10', ipMode: 'VIP', hostname: nlb, resolvedFrom: nlb },
      { ip: '10.0.51.10', ipMode: 'VIP', hostname: nlb, resolvedFrom: nlb },
    ]);
    expect(s.lbHostnameLookups).toEqual([l]);
    expect(s.internalLb).toBe(true);
    // Untouched ports are the same objects; the input view is not changed.
    expect(out.services.find((x) => x.name === 'hetzner')).toBe(view.services.find((x) => x.name === 'hetzner'));
    expect(view.services.find((x) => x.name === 'nlb')!.lbIngress).toEqual([]);
    expect(withLbHostnames(view, new Map())).toBe(view);
  });
});

describe('lbClientAddress', () => {
  const A = 'service.beta.kubernetes.io/aws-load-balancer-';
  it('follows each provider’s documented defaults', () => {
    const kind = (raw: Record<string, string>, cls?: string, proto = 'TCP') => lbClientAddress(raw, cls, proto).kind;
    expect(kind({}, 'service.k8s.aws/nlb')).toBe('preserved');
    expect(kind({ [`${A}type`]: 'nlb' })).toBe('preserved');
    expect(kind({ [`${A}nlb-target-type`]: 'ip' }, 'service.k8s.aws/nlb')).toBe('proxied');
    expect(kind({ [`${A}nlb-target-type`]: 'ip' }, 'service.k8s.aws/nlb', 'UDP')).toBe('preserved');
    expect(
      kind(
        { [`${A}nlb-target-type`]: 'ip', [`${A}target-group-attributes`]: 'preserve_client_ip.enabled=true' },
        'service.k8s.aws/nlb',
      ),
    ).toBe('preserved');
    expect(
      kind(
        { [`${A}target-group-attributes`]: 'stickiness.enabled=true, preserve_client_ip.enabled=false' },
        'service.k8s.aws/nlb',
      ),
    ).toBe('proxied');
    expect(kind({ [`${A}proxy-protocol`]: '*', [`${A}type`]: 'external' })).toBe('proxy-protocol');
    expect(kind({ 'load-balancer.hetzner.cloud/location': 'fsn1' })).toBe('proxied');
    expect(kind({ 'load-balancer.hetzner.cloud/uses-proxyprotocol': 'true' })).toBe('proxy-protocol');
    expect(kind({ 'loadbalancer.openstack.org/proxy-protocol': 'true' })).toBe('proxy-protocol');
    expect(kind({ 'oci.oraclecloud.com/load-balancer-type': 'lb' })).toBe('proxied');
    expect(kind({ 'oci.oraclecloud.com/load-balancer-type': 'nlb' })).toBe('unknown');
    expect(
      kind({
        'oci.oraclecloud.com/load-balancer-type': 'nlb',
        'oci-network-load-balancer.oraclecloud.com/is-preserve-source': 'true',
      }),
    ).toBe('preserved');
    expect(kind({})).toBe('unknown');
  });
});
