// Hostname-only LB names past --dns-max-names: which are kept is fair (the cloud's names before
// user-chosen ones, namespaces taking turns), and the dns source says how many were not looked up
// instead of staying silently up.
import { describe, expect, it } from 'vitest';
import type { LookupRound } from '../../../src/cluster/dns/lookup.js';
import { loadClusterFile } from '../../../src/cluster/file.js';
import { lbHostnamesOf } from '../../../src/cluster/lb-hostnames.js';
import type { ClusterView, ServiceView } from '../../../src/cluster/types.js';
import { dnsReader } from '../../../src/source/dns.js';

const FIX = new URL('../../fixtures/', import.meta.url).pathname;
const base = loadClusterFile(`${FIX}bundles/aws-nlb-hostname/cluster.json`, { nodeName: 'node-a' });
const template = base.services.find((s) => s.name === 'nlb')!;
const svc = (namespace: string, name: string, hostname: string, chosen = false): ServiceView => ({
  ...template,
  namespace,
  name,
  lbHostnames: [hostname],
  ...(chosen ? { chosenLbHostnames: [hostname] } : { chosenLbHostnames: undefined }),
});
const viewOf = (services: ServiceView[]): ClusterView => ({ ...base, services });

describe('lbHostnamesOf under a cap', () => {
  // A tenant's 300 names sort before the shop's two real NLB names.
  const tenant = Array.from({ length: 300 }, (_, i) =>
    svc('aaa-tenant', `s${i}`, `a${String(i).padStart(3, '0')}.tenant.example`),
  );
  const shop = [
    svc('shop', 'api', 'k8s-shop-api-1.elb.eu-west-1.amazonaws.com'),
    svc('shop', 'web', 'k8s-shop-web-2.elb.eu-west-1.amazonaws.com'),
  ];

  it("keeps every namespace's names when one namespace publishes more than the cap", () => {
    const kept = lbHostnamesOf(viewOf([...tenant, ...shop])).slice(0, 256);
    expect(kept).toContain('k8s-shop-api-1.elb.eu-west-1.amazonaws.com');
    expect(kept).toContain('k8s-shop-web-2.elb.eu-west-1.amazonaws.com');
    expect(kept.filter((n) => n.endsWith('.tenant.example'))).toHaveLength(254);
  });

  it("puts names a Service's annotation chose after the names the cloud wrote", () => {
    const chosen = Array.from({ length: 10 }, (_, i) => svc('aaa', `c${i}`, `c${i}.chosen.example`, true));
    const names = lbHostnamesOf(viewOf([...chosen, ...shop]));
    expect(names.slice(0, 2)).toEqual([
      'k8s-shop-api-1.elb.eu-west-1.amazonaws.com',
      'k8s-shop-web-2.elb.eu-west-1.amazonaws.com',
    ]);
    expect(names).toHaveLength(12);
  });

  it('lists a name shared by several Services once', () => {
    expect(lbHostnamesOf(viewOf([svc('a', 'x', 'same.example'), svc('b', 'y', 'same.example')]))).toEqual([
      'same.example',
    ]);
  });
});

describe('the dns source over the cap', () => {
  const names = ['n1.example', 'n2.example', 'n3.example', 'n4.example', 'n5.example', 'n6.example'];
  /** The resolver's answer for each name asked (the transport; dnsReader and the cache are real). */
  const answer = async (_netns: string | undefined, asked: readonly string[]): Promise<LookupRound> => ({
    resolver: 'nameserver 192.0.2.53 (test)',
    warnings: [],
    results: asked.map((hostname, i) => ({ hostname, addresses: [{ ip: `192.0.2.${i + 1}`, ttl: 60 }] })),
  });

  it('is up but degraded, counting and naming the names not looked up', async () => {
    const r = await dnsReader({ lbHostnames: () => names, dnsLookup: { maxNames: 4 } }, answer).read();
    expect(r.state).toBe('up');
    if (r.state !== 'up') return;
    expect(r.value.lookups.map((l) => l.hostname)).toEqual(names.slice(0, 4));
    expect(r.note).toBe('2 of 6 LB hostnames not looked up: more than --dns-max-names 4 (n5.example, n6.example)');
  });

  it('is up without a note within the cap', async () => {
    const r = await dnsReader({ lbHostnames: () => names, dnsLookup: { maxNames: 6 } }, answer).read();
    expect(r).toMatchObject({ state: 'up' });
    expect(r.state === 'up' && r.note).toBeFalsy();
  });
});
