// kube-proxy's nftables tables interpreted (captured `nft -j` listings of the
// lab's ruleset, test/fixtures/nft), and the diagnosis on an nftables node and
// on IPVS nodes (IPVS deprecated: what nftables would change per Service).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadClusterFile } from '../../../src/cluster/file.js';
import { diagnose } from '../../../src/detect/index.js';
import { diagnoseInputOf } from '../../../src/detect/input.js';
import type { Finding } from '../../../src/detect/types.js';
import { parseNftJson } from '../../../src/kernel/nft/parse.js';
import type { NftSnapshot } from '../../../src/kernel/nft/types.js';
import { kubeNatFacts } from '../../../src/kubeproxy/facts.js';
import { kubeNftFacts, serviceOfChain } from '../../../src/kubeproxy/nftables.js';
import type { NodeSnapshot } from '../../../src/source/node-snapshot.js';
import { labClusterList, NODE_NAME } from '../../support/nft-services.js';
import { loadCase } from '../detect/fixture-bundle.js';
import { nftFixture, nftSnapshotOf } from './fixtures.js';

const lb = (layout: 'v1.31' | 'v1.34', vip: string) => {
  const f = kubeNftFacts(nftSnapshotOf(layout)).loadBalancers.find((l) => l.vip === vip);
  if (!f) throw new Error(`no LB fact for ${vip}`);
  return f;
};

describe('kubeNftFacts on captured kube-proxy tables', () => {
  it('names kube-proxy ServicePortNames from chain names', () => {
    expect(serviceOfChain('external-42NFTM6N-ns2/svc2/tcp/p80')).toBe('ns2/svc2:p80');
    expect(serviceOfChain('services')).toBeUndefined();
  });

  it('tells the two filter-chain layouts apart, per family', () => {
    expect(kubeNftFacts(nftSnapshotOf('v1.31')).layouts).toEqual({ 4: 'v1.31', 6: 'v1.31' });
    expect(kubeNftFacts(nftSnapshotOf('v1.34')).layouts).toEqual({ 4: 'v1.34', 6: 'v1.34' });
  });

  it('per LB IP: ETP, masquerade, capture, and the pre-DNAT drop of the v1.31 layout', () => {
    expect(lb('v1.34', '203.0.113.10')).toMatchObject({
      service: 'shop/web:http',
      trafficPolicy: 'Cluster',
      podTraffic: 'masquerade',
      capture: 'dnat',
    });
    expect(lb('v1.34', '203.0.113.11')).toMatchObject({
      trafficPolicy: 'Local',
      podTraffic: 'exempt',
      capture: 'dnat',
    });
    expect(lb('v1.34', '203.0.113.12').noEndpoints).toMatchObject({ verdict: 'drop', preDnatChecks: [] });
    expect(lb('v1.31', '203.0.113.12').noEndpoints).toMatchObject({
      verdict: 'drop',
      preDnatChecks: ['filter-output (hook output, priority -110)'],
    });
    expect(lb('v1.31', '203.0.113.12').noEndpoints!.evidence[1]).toBe(
      'kube-proxy-v1.31.ip.json: chain filter-output { type filter hook output priority -110 }: ct state new jump service-endpoints-check',
    );
    expect(lb('v1.34', '203.0.113.13')).toMatchObject({ capture: 'dropped', noEndpoints: { verdict: 'reject' } });
    expect(lb('v1.34', '203.0.113.15')).toMatchObject({ capture: 'dropped' });
    expect(() => lb('v1.34', '203.0.113.14')).toThrow(); // ipMode Proxy: not in kube-proxy's maps
  });

  it('IPv6 tables: the same facts, with the family', () => {
    expect(lb('v1.34', '2001:db8:113::10')).toMatchObject({
      family: 6,
      trafficPolicy: 'Cluster',
      podTraffic: 'masquerade',
      capture: 'dnat',
    });
    expect(lb('v1.31', '2001:db8:113::12')).toMatchObject({
      family: 6,
      trafficPolicy: 'Local',
      podTraffic: 'exempt',
      noEndpoints: { verdict: 'drop' },
    });
  });

  it('merged with iptables facts: mode nftables, NodePorts, pod selectors', () => {
    const f = kubeNatFacts(undefined, nftSnapshotOf('v1.34', ['ip']));
    expect(f.mode).toBe('nftables');
    expect(f.podSelectors[4]).toEqual({ cidrs: ['10.244.0.0/16'], interfaces: [] });
    expect(f.nodePorts.find((n) => n.port === 30012)).toMatchObject({
      service: 'shop/far:http',
      trafficPolicy: 'Local',
    });
    expect(kubeNatFacts(undefined, { tables: [], sources: {}, absent: ['ip', 'ip6'], warnings: [] }).mode).toBe('none');
  });
});

describe('diagnose on an nftables node (captured tables + the lab cluster)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cbn-unit-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'cluster.json'), JSON.stringify(labClusterList()));
  const run = (layout: 'v1.31' | 'v1.34', tweak?: (c: ReturnType<typeof loadClusterFile>) => void): Finding[] => {
    const node: NodeSnapshot = {
      takenAt: '',
      hostname: NODE_NAME,
      kernel: '',
      sources: [],
      nft: nftSnapshotOf(layout, ['ip']),
    };
    const cluster = loadClusterFile(join(dir, 'cluster.json'), { nodeName: NODE_NAME });
    tweak?.(cluster);
    return diagnose({ ...diagnoseInputOf(node, cluster), conntrack: [] }).findings;
  };
  const of = (fs: Finding[], svc: string, mech: string) =>
    fs.filter((f) => f.service.name === svc && f.mechanism === mech);

  it('v1.31 layout: the ETP=Local Service without local endpoints is a risk naming kubernetes#131765', () => {
    const [f] = of(run('v1.31'), 'far', 'local-no-ep');
    expect(f).toMatchObject({ severity: 'risk' });
    expect(f!.summary).toContain('kubernetes#131765');
    expect(f!.remedy).toContain('#132456');
  });

  it("a local endpoint serving while it terminates: kube-proxy's rules decide, and these still drop", () => {
    const found = run('v1.31', (cluster) => {
      for (const s of cluster.services.filter((x) => x.name === 'far'))
        s.endpoints = [
          ...s.endpoints,
          { address: '10.244.1.77', nodeName: NODE_NAME, local: true, ready: false, servingTerminating: true },
        ];
    });
    expect(of(found, 'far', 'local-no-ep')).toMatchObject([{ severity: 'risk' }]);
  });

  it('v1.34 layout: the same Service is context only (pods are short-circuited)', () => {
    expect(of(run('v1.34'), 'far', 'local-no-ep')).toMatchObject([{ severity: 'info' }]);
  });

  it('names the mode per LB IP and says which IPs kube-proxy leaves to the LB', () => {
    const fs = run('v1.34');
    expect(of(fs, 'web', 'proxy-mode')[0]!.summary).toMatch(
      /nftables mode: 203\.0\.113\.10:80 is in kube-proxy's service-ips/,
    );
    expect(of(fs, 'proxy', 'proxy-mode')[0]!.summary).toMatch(/no kube-proxy map holds this LB IP:port/);
    for (const svc of ['web', 'api', 'far'])
      expect(fs.filter((f) => f.service.name === svc && ['L4-loop', 'no-SNAT'].includes(f.mechanism))).toEqual([]);
  });
});

describe('IPVS nodes: the proxy-mode finding says IPVS is deprecated and what nftables would change', () => {
  const modeOf = (name: string, svc: string): Finding => {
    const { input } = loadCase(name);
    const f = diagnose(input).findings.find((x) => x.mechanism === 'proxy-mode' && x.service.name === svc);
    if (!f) throw new Error(`no proxy-mode finding for ${svc}`);
    return f;
  };

  it('LB IP not bound (TKE style): would stop looping under nftables', () => {
    const f = modeOf('tke-ipvs-unbound-l4-loop', 'web');
    expect(f.summary).toContain('IPVS mode is deprecated since Kubernetes v1.35 (KEP-5495)');
    expect(f.remedy).toMatch(/^Plan the move to kube-proxy nftables mode\. Under nftables: would stop looping: /);
  });

  it('LB IP bound (community): hc-drop and port-refused go away under nftables', () => {
    const f = modeOf('community-ipvs-bound', 'web');
    expect(f.summary).toContain('deprecated since Kubernetes v1.35');
    expect(f.remedy).toContain('hc-drop goes away');
    expect(f.remedy).toContain('port-refused goes away');
  });

  it('an iptables node gets no deprecation text', () => {
    const { input } = loadCase('iptables-1.29-nft-no-loop');
    const fs = diagnose(input).findings.filter((x) => x.mechanism === 'proxy-mode');
    expect(fs.length).toBeGreaterThan(0);
    for (const f of fs) expect(f.summary).not.toContain('deprecated');
  });
});

describe('kubeNftFacts on a corrupt listing: a prefix length past the address', () => {
  type Item = {
    rule?: { chain: string; expr: { match?: { left: { payload?: { field: string } }; right: unknown } }[] };
  };
  /** The captured listing with the prefix (or address) of the chain's first `field` match replaced. */
  const corrupt = (
    name: string,
    edits: { chain: string; field: 'saddr' | 'daddr'; right: unknown }[],
  ): NftSnapshot['tables'] => {
    const doc = JSON.parse(nftFixture(name)) as { nftables: Item[] };
    for (const e of edits) {
      const rule = doc.nftables.find((i) => i.rule?.chain === e.chain)?.rule;
      const m = rule?.expr.find((x) => x.match?.left.payload?.field === e.field)?.match;
      if (!m) throw new Error(`no ${e.field} match in ${e.chain}`);
      m.right = e.right;
    }
    return parseNftJson(JSON.stringify(doc), name).tables;
  };
  const snap = (): NftSnapshot => ({
    tables: [
      ...corrupt('kube-proxy-v1.34.ip.json', [
        // ETP=Local's "short-circuit pod traffic" (also read as the pod selector), the firewall's
        // loadBalancerSourceRanges and a destination match on the walk of 203.0.113.10.
        {
          chain: 'external-WEZGB4Y6-shop/api/tcp/http',
          field: 'saddr',
          right: { prefix: { addr: '10.244.0.0', len: 99 } },
        },
        {
          chain: 'firewall-E4CSEQH2-shop/ranged/tcp/http',
          field: 'saddr',
          right: { prefix: { addr: '198.51.100.0', len: 99999999999 } },
        },
        {
          chain: 'service-KHN6ECMT-shop/web/tcp/http',
          field: 'daddr',
          right: { prefix: { addr: '203.0.113.10', len: 33 } },
        },
      ]),
      ...corrupt('kube-proxy-v1.34.ip6.json', [
        {
          chain: 'external-YSFNGHT2-shop/far/tcp/http',
          field: 'saddr',
          right: { prefix: { addr: 'fd00:10:244::', len: 200 } },
        },
      ]),
    ],
    sources: { ip: 'kube-proxy-v1.34.ip.json', ip6: 'kube-proxy-v1.34.ip6.json' },
    absent: [],
    warnings: [],
  });

  it('never throws, keeps every LB IP, and reads the bad prefix as matching nothing', () => {
    const good = kubeNftFacts(nftSnapshotOf('v1.34'));
    const bad = kubeNftFacts(snap());
    expect(bad.loadBalancers.map((l) => l.vip)).toEqual(good.loadBalancers.map((l) => l.vip));
    // Services whose rules were not touched are read exactly as before.
    for (const vip of ['203.0.113.12', '203.0.113.13', '2001:db8:113::10']) {
      expect(bad.loadBalancers.find((l) => l.vip === vip)).toEqual(good.loadBalancers.find((l) => l.vip === vip));
    }
    // The corrupt pod selector selects no pod: the other rules' 10.244.0.0/16 remains, nothing else.
    expect(bad.podSelectors[4]).toEqual({ cidrs: ['10.244.0.0/16'], interfaces: [] });
    expect(bad.podSelectors[6]!.cidrs).not.toContain('fd00:10:244::/200');
    // `ip saddr != <no range> drop`: no source is in the range, so every source is dropped.
    expect(bad.loadBalancers.find((l) => l.vip === '203.0.113.15')).toMatchObject({ capture: 'dropped' });
    // The short-circuit matches no pod: pods take the ETP=Local path to the local endpoint.
    const api = bad.loadBalancers.find((l) => l.vip === '203.0.113.11')!;
    expect(api).toMatchObject({ trafficPolicy: 'Local', capture: 'dnat' });
    expect(api.evidence.some((e) => e.includes('chain local-WEZGB4Y6'))).toBe(true);
    expect(
      good.loadBalancers
        .find((l) => l.vip === '203.0.113.11')!
        .evidence.some((e) => e.includes('chain local-WEZGB4Y6')),
    ).toBe(false);
    expect(bad.loadBalancers.find((l) => l.vip === '203.0.113.10')).toMatchObject({
      capture: 'dnat',
      podTraffic: 'masquerade',
    });
  });
});

describe('kubeNftFacts on a hostile listing: loops and chains jumped to twice per level', () => {
  const WEB = 'external-KHN6ECMT-shop/web/tcp/http';
  const rule = (chain: string, handle: number, mark: number, target: string, verdict: 'jump' | 'goto' = 'jump') => ({
    rule: {
      family: 'ip',
      table: 'kube-proxy',
      chain,
      handle,
      expr: [{ match: { op: '==', left: { meta: { key: 'mark' } }, right: mark } }, { [verdict]: { target } }],
    },
  });
  /** The captured v1.34 listing with `extra` items put before the web Service's external chain's rules. */
  const withItems = (extra: unknown[]): NftSnapshot => {
    const doc = JSON.parse(nftFixture('kube-proxy-v1.34.ip.json')) as { nftables: unknown[] };
    doc.nftables.splice(3, 0, ...extra);
    return {
      tables: parseNftJson(JSON.stringify(doc), 'kube-proxy-v1.34.ip.json').tables,
      sources: { ip: 'kube-proxy-v1.34.ip.json' },
      absent: ['ip6'],
      warnings: [],
    };
  };
  const good = kubeNftFacts(nftSnapshotOf('v1.34', ['ip']));
  const timed = (snap: NftSnapshot) => {
    const t0 = performance.now();
    const f = kubeNftFacts(snap);
    return { f, ms: performance.now() - t0 };
  };

  it('a chain that jumps to itself (netfilter would refuse it): the walk ends, the facts stand', () => {
    // Before, two self-jumps overflowed the stack (RangeError); three took 3^16 walks.
    const { f, ms } = timed(withItems([0, 1, 2].map((i) => rule(WEB, 900 + i, i, WEB))));
    expect(ms).toBeLessThan(2000);
    expect(f.loadBalancers.map((l) => l.vip)).toEqual(good.loadBalancers.map((l) => l.vip));
    expect(f.loadBalancers.find((l) => l.vip === '203.0.113.10')).toMatchObject({
      capture: 'dnat',
      podTraffic: 'masquerade',
    });
    expect(f.loadBalancers.find((l) => l.vip === '203.0.113.12')).toEqual(
      good.loadBalancers.find((l) => l.vip === '203.0.113.12'),
    );
  });

  it('30 levels of chains, each jumping twice to the next: each chain walked once', () => {
    const levels = 30;
    const name = (i: number) => `ladder-${i}`;
    const items: unknown[] = [];
    for (let i = 0; i < levels; i++)
      items.push({ chain: { family: 'ip', table: 'kube-proxy', name: name(i), handle: 800 + i } });
    for (let i = 0; i + 1 < levels; i++)
      items.push(rule(name(i), 1000 + 2 * i, 1, name(i + 1)), rule(name(i), 1001 + 2 * i, 2, name(i + 1)));
    items.push(rule(WEB, 999, 0, name(0)));
    const { f, ms } = timed(withItems(items));
    expect(ms).toBeLessThan(2000);
    const web = f.loadBalancers.find((l) => l.vip === '203.0.113.10')!;
    expect(web).toMatchObject({ capture: 'dnat', podTraffic: 'masquerade' });
    // Each ladder rule is evidence once (as far as the depth limit reaches), not once per path.
    expect(web.evidence.filter((e) => e.includes('chain ladder-3:')).length).toBe(2);
  });
});
