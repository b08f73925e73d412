import { describe, expect, it } from 'vitest';
import { parseIptablesSave } from '../../../src/kernel/nat/iptables-save.js';
import type { NatSnapshot } from '../../../src/kernel/nat/types.js';
import { kubeNatFacts, type LoadBalancerFact, nodePortEvidence } from '../../../src/kubeproxy/facts.js';
import { fixture, snapshotOf } from './fixtures.js';

const OLD = snapshotOf('legacy', { v4: 'iptables-1.21-legacy.v4.save' });
const NEW = snapshotOf('nft', { v4: 'iptables-1.29-nft.v4.save', v6: 'iptables-1.29-nft.v6.save' });
const IPVS = snapshotOf('nft', { v4: 'ipvs-1.28.v4.save', ipset: 'ipvs-1.28.ipset.save' });

const lb = (nat: NatSnapshot, vip: string): LoadBalancerFact => {
  const f = kubeNatFacts(nat).loadBalancers.find((l) => l.vip === vip);
  if (!f) throw new Error(`no LB fact for ${vip}`);
  return f;
};
/** A snapshot of one hand-written nat table (variants of the fixtures). */
const natOf = (rules: string): NatSnapshot => {
  const v4 = parseIptablesSave(`*nat\n${rules}\nCOMMIT\n`, { source: 'variant', family: 4 });
  return { ...OLD, v4, warnings: [] };
};

describe('kubeNatFacts: iptables mode before 1.24 (KUBE-FW / KUBE-XLB)', () => {
  it('finds the mode and the chain-name generation', () => {
    const f = kubeNatFacts(OLD);
    expect(f.mode).toBe('iptables');
    expect(f.iptablesGeneration).toBe('pre-1.24');
    expect(f.podSelectors[4]).toEqual({ cidrs: ['10.244.0.0/16'], interfaces: [] });
  });

  it('ETP=Cluster: pod -> LB IP is marked for masquerade in KUBE-FW, with the lines that do it', () => {
    const web = lb(OLD, '192.0.2.10');
    expect(web).toMatchObject({
      port: 80,
      protocol: 'tcp',
      service: 'shop/web:http',
      trafficPolicy: 'Cluster',
      podTraffic: 'masquerade',
      capture: 'dnat',
    });
    expect(web.evidence[0]).toBe(
      'iptables-1.21-legacy.v4.save:70: -A KUBE-SERVICES -d 192.0.2.10/32 -p tcp -m comment --comment "shop/web:http loadbalancer IP" -m tcp --dport 80 -j KUBE-FW-67NZLRHBNDSAWJRO',
    );
    expect(web.evidence).toContain(
      'iptables-1.21-legacy.v4.save:38: -A KUBE-FW-67NZLRHBNDSAWJRO -m comment --comment "shop/web:http loadbalancer IP" -j KUBE-MARK-MASQ',
    );
    expect(new Set(web.evidence).size).toBe(web.evidence.length);
  });

  it('ETP=Local: pod traffic skips KUBE-MARK-MASQ through the KUBE-XLB "Redirect pods" rule', () => {
    const api = lb(OLD, '192.0.2.20');
    expect(api).toMatchObject({
      service: 'shop/api:http',
      trafficPolicy: 'Local',
      podTraffic: 'exempt',
      capture: 'dnat',
    });
    expect(api.evidence).toContain(
      'iptables-1.21-legacy.v4.save:81: -A KUBE-XLB-RUKNB3TURLFC6SGL -s 10.244.0.0/16 -m comment --comment "Redirect pods trying to reach external loadbalancer VIP to clusterIP" -j KUBE-SVC-RUKNB3TURLFC6SGL',
    );
    // Endpoint hairpin rules (-s endpoint/32 -j KUBE-MARK-MASQ) are about one pod, not the client: not on the path.
    expect(api.evidence.some((e) => e.includes('-s 10.244.1.6/32'))).toBe(false);
  });

  it('maps NodePorts to Services and policies', () => {
    expect(
      kubeNatFacts(OLD).nodePorts.map((n) => [
        n.port,
        n.protocol,
        n.service,
        n.trafficPolicy,
        nodePortEvidence(n).length,
      ]),
    ).toEqual([
      [30080, 'tcp', 'shop/web:http', 'Cluster', 2],
      [31080, 'tcp', 'shop/api:http', 'Local', 2],
    ]);
    expect(nodePortEvidence(kubeNatFacts(OLD).nodePorts[1]!)).toEqual([
      'iptables-1.21-legacy.v4.save:47: -A KUBE-NODEPORTS -s 127.0.0.0/8 -p tcp -m comment --comment "shop/api:http" -m tcp --dport 31080 -j KUBE-MARK-MASQ',
      'iptables-1.21-legacy.v4.save:48: -A KUBE-NODEPORTS -p tcp -m comment --comment "shop/api:http" -m tcp --dport 31080 -j KUBE-XLB-RUKNB3TURLFC6SGL',
    ]);
  });
});

describe('kubeNatFacts: iptables mode 1.24+ (KUBE-EXT / KUBE-SVL)', () => {
  it('ETP=Cluster masquerades, ETP=Local exempts pod traffic, on IPv4 and IPv6', () => {
    const f = kubeNatFacts(NEW);
    expect(f).toMatchObject({ mode: 'iptables', iptablesGeneration: '1.24+' });
    expect(f.podSelectors[6]).toEqual({ cidrs: ['fd00:10:244::/56'], interfaces: [] });
    expect(lb(NEW, '192.0.2.10')).toMatchObject({
      trafficPolicy: 'Cluster',
      podTraffic: 'masquerade',
      capture: 'dnat',
    });
    expect(lb(NEW, '192.0.2.10').evidence).toContain(
      'iptables-1.29-nft.v4.save:77: -A KUBE-EXT-67NZLRHBNDSAWJRO -m comment --comment "masquerade traffic for shop/web:http external destinations" -j KUBE-MARK-MASQ',
    );
    expect(lb(NEW, '192.0.2.20')).toMatchObject({ trafficPolicy: 'Local', podTraffic: 'exempt', capture: 'dnat' });
    expect(lb(NEW, '192.0.2.20').evidence).toContain(
      'iptables-1.29-nft.v4.save:81: -A KUBE-EXT-RUKNB3TURLFC6SGL -s 10.244.0.0/16 -m comment --comment "pod traffic for shop/api:http external destinations" -j KUBE-SVC-RUKNB3TURLFC6SGL',
    );
    expect(lb(NEW, '2001:db8:1b::20')).toMatchObject({
      family: 6,
      service: 'shop/api6:http',
      trafficPolicy: 'Local',
      podTraffic: 'exempt',
    });
  });

  it('with loadBalancerSourceRanges that exclude pods, the nat table lets pod traffic through and KUBE-PROXY-FIREWALL drops it', () => {
    const f = lb(NEW, '192.0.2.30');
    expect(f).toMatchObject({
      service: 'shop/admin:https',
      trafficPolicy: 'Cluster',
      capture: 'dropped',
      sourceRangeDrop: { certain: true },
    });
    expect(f.sourceRangeDrop!.evidence).toEqual([
      'iptables-1.29-nft.v4.save:85: -A KUBE-FW-BSIRI4CEMEWXIOFC -s 203.0.113.0/24 -m comment --comment "shop/admin:https loadbalancer IP" -j KUBE-EXT-BSIRI4CEMEWXIOFC',
      'iptables-1.29-nft.v4.save:86: -A KUBE-FW-BSIRI4CEMEWXIOFC -m comment --comment "other traffic to shop/admin:https will be dropped by KUBE-PROXY-FIREWALL"',
      'iptables-1.29-nft.v4.save:42: -A KUBE-PROXY-FIREWALL -d 192.0.2.30/32 -p tcp -m comment --comment "shop/admin:https traffic not accepted by KUBE-FW-BSIRI4CEMEWXIOFC" -m tcp --dport 443 -j DROP (filter table)',
    ]);
    // Without source ranges nothing is dropped.
    expect(lb(NEW, '192.0.2.10').sourceRangeDrop).toBeUndefined();
  });

  it('maps NodePorts of both families', () => {
    expect(kubeNatFacts(NEW).nodePorts.map((n) => [n.family, n.port, n.service, n.trafficPolicy])).toEqual([
      [4, 30080, 'shop/web:http', 'Cluster'],
      [4, 31080, 'shop/api:http', 'Local'],
      [4, 30443, 'shop/admin:https', 'Cluster'],
      [6, 31681, 'shop/api6:http', 'Local'],
    ]);
  });

  it('handles an interface-based local detector (-i veth+) and a missing one', () => {
    const text = fixture('iptables-1.29-nft.v4.save');
    const nat = text.slice(text.indexOf('*nat\n') + 5, text.indexOf('COMMIT', text.indexOf('*nat')));
    const byIface = natOf(
      nat
        .replaceAll('-s 10.244.0.0/16 -m comment --comment "pod traffic', '-i veth+ -m comment --comment "pod traffic')
        .replaceAll('! -s 10.244.0.0/16', '! -i veth+'),
    );
    expect(kubeNatFacts(byIface).podSelectors[4]).toEqual({ cidrs: [], interfaces: ['veth+'] });
    expect(lb(byIface, '192.0.2.20')).toMatchObject({ podTraffic: 'exempt', trafficPolicy: 'Local', capture: 'dnat' });
    expect(lb(byIface, '192.0.2.10')).toMatchObject({ podTraffic: 'masquerade' });
    // No detector: kube-proxy writes no "pod traffic" rule; pods reach KUBE-SVL (local endpoints only), still unmasqueraded.
    const none = natOf(
      nat
        .split('\n')
        .filter((l) => !l.includes('pod traffic for'))
        .join('\n'),
    );
    const api = lb(none, '192.0.2.20');
    expect(api).toMatchObject({ podTraffic: 'exempt', trafficPolicy: 'Local', capture: 'dnat' });
    expect(api.evidence.some((e) => e.includes('-A KUBE-SVL-RUKNB3TURLFC6SGL'))).toBe(true);
  });

  it('says "unknown" when a masquerade mark depends on something the rules do not tell', () => {
    const nat = natOf(
      [
        ':PREROUTING ACCEPT [0:0]',
        ':KUBE-SERVICES - [0:0]',
        ':KUBE-EXT-X - [0:0]',
        ':KUBE-MARK-MASQ - [0:0]',
        '-A PREROUTING -j KUBE-SERVICES',
        '-A KUBE-SERVICES -d 198.51.100.7/32 -p tcp -m comment --comment "a/b:c loadbalancer IP" -m tcp --dport 8443 -j KUBE-EXT-X',
        '-A KUBE-EXT-X -m mark --mark 0x1/0x1 -j KUBE-MARK-MASQ',
        '-A KUBE-EXT-X -p tcp -j DNAT --to-destination 10.1.2.3:8443',
      ].join('\n'),
    );
    expect(lb(nat, '198.51.100.7')).toMatchObject({ service: 'a/b:c', podTraffic: 'unknown', capture: 'dnat' });
    expect(lb(nat, '198.51.100.7').evidence).toContain(
      'variant:8: -A KUBE-EXT-X -m mark --mark 0x1/0x1 -j KUBE-MARK-MASQ (may not apply)',
    );
  });
});

describe('kubeNatFacts on a large node', () => {
  it('gives each of 300 LB Services its own answer (KUBE-SERVICES walked through its destination index)', () => {
    const chains = [
      ':PREROUTING ACCEPT [0:0]',
      ':KUBE-SERVICES - [0:0]',
      ':KUBE-MARK-MASQ - [0:0]',
      ':KUBE-NODEPORTS - [0:0]',
    ];
    const services: string[] = [];
    const rest: string[] = [];
    for (let i = 0; i < 300; i++) {
      const h = `KUBE-EXT-${String(i).padStart(16, '0')}`;
      const svc = `KUBE-SVC-${String(i).padStart(16, '0')}`;
      const vip = `198.18.${i >> 8}.${i & 255}`;
      const local = i % 3 === 0;
      chains.push(`:${h} - [0:0]`, `:${svc} - [0:0]`);
      services.push(
        `-A KUBE-SERVICES -d 10.96.${i >> 8}.${i & 255}/32 -p tcp -m comment --comment "ns/s${i}:http cluster IP" -m tcp --dport 80 -j ${svc}`,
      );
      services.push(
        `-A KUBE-SERVICES -d ${vip}/32 -p tcp -m comment --comment "ns/s${i}:http loadbalancer IP" -m tcp --dport 80 -j ${h}`,
      );
      rest.push(
        local
          ? `-A ${h} -s 10.244.0.0/16 -m comment --comment "pod traffic for ns/s${i}:http external destinations" -j ${svc}`
          : `-A ${h} -m comment --comment "masquerade traffic for ns/s${i}:http external destinations" -j KUBE-MARK-MASQ`,
        `-A ${h} -j ${svc}`,
        `-A ${svc} -p tcp -m comment --comment "ns/s${i}:http -> 10.244.9.${i & 255}:8080" -m tcp -j DNAT --to-destination 10.244.9.${i & 255}:8080`,
      );
    }
    // A rule for a whole range and a negated destination must still be seen in order, before the VIP rules.
    services.unshift(
      '-A KUBE-SERVICES ! -d 198.18.0.0/15 -j RETURN',
      '-A KUBE-SERVICES -d 198.18.1.0/24 -p tcp -m tcp --dport 80 -j KUBE-MARK-MASQ',
    );
    const nat = natOf([...chains, '-A PREROUTING -j KUBE-SERVICES', ...rest, ...services].join('\n'));
    const lbs = kubeNatFacts(nat).loadBalancers;
    expect(lbs).toHaveLength(300);
    for (const [i, l] of lbs.entries()) {
      const inRange = i >= 256; // 198.18.1.x is marked by the range rule whatever its policy
      expect([l.service, l.trafficPolicy, l.podTraffic, l.capture]).toEqual([
        `ns/s${i}:http`,
        i % 3 === 0 ? 'Local' : 'Cluster',
        i % 3 === 0 && !inRange ? 'exempt' : 'masquerade',
        'dnat',
      ]);
    }
  });
});

describe('kubeNatFacts: evidence of an endpoint fan-out', () => {
  it('quotes one endpoint chain and counts the others, so a fact does not grow with its endpoints', () => {
    const seps = Array.from({ length: 50 }, (_, i) => `KUBE-SEP-${String(i).padStart(16, '0')}`);
    const svc = 'KUBE-SVC-AAAAAAAAAAAAAAAA';
    const text = [
      ':PREROUTING ACCEPT [0:0]',
      ':KUBE-SERVICES - [0:0]',
      ':KUBE-MARK-MASQ - [0:0]',
      ':KUBE-FW-AAAAAAAAAAAAAAAA - [0:0]',
      `:${svc} - [0:0]`,
      ...seps.map((c) => `:${c} - [0:0]`),
      '-A PREROUTING -j KUBE-SERVICES',
      '-A KUBE-SERVICES -d 192.0.2.99/32 -p tcp -m comment --comment "ns/big:http loadbalancer IP" -m tcp --dport 80 -j KUBE-FW-AAAAAAAAAAAAAAAA',
      '-A KUBE-FW-AAAAAAAAAAAAAAAA -j KUBE-MARK-MASQ',
      `-A KUBE-FW-AAAAAAAAAAAAAAAA -j ${svc}`,
      // As kube-proxy writes them: the last endpoint takes what the others left, without a statistic match.
      ...seps.map((c, i) =>
        i < 49
          ? `-A ${svc} -m statistic --mode random --probability ${(1 / (50 - i)).toFixed(11)} -j ${c}`
          : `-A ${svc} -j ${c}`,
      ),
      ...seps.map((c, i) => `-A ${c} -p tcp -m tcp -j DNAT --to-destination 10.244.3.${i}:8080`),
    ].join('\n');
    const big = lb(natOf(text), '192.0.2.99');
    expect(big).toMatchObject({ service: 'ns/big:http', podTraffic: 'masquerade', capture: 'dnat' });
    expect(big.evidence.filter((e) => e.includes('DNAT --to-destination'))).toEqual([
      `variant:111: -A ${seps[0]} -p tcp -m tcp -j DNAT --to-destination 10.244.3.0:8080 (may not apply)`,
    ]);
    expect(big.evidence).toContain(
      `variant: ${svc} jumps to 49 more endpoint chains (KUBE-SEP-... DNAT), like the one above`,
    );
    expect(big.evidence.length).toBeLessThan(10);
  });
});

describe('kubeNatFacts: IPVS mode', () => {
  it('reads VIPs from the KUBE-LOAD-BALANCER ipset and policy from KUBE-LOAD-BALANCER-LOCAL', () => {
    const f = kubeNatFacts(IPVS);
    expect(f.mode).toBe('ipvs');
    expect(f.iptablesGeneration).toBeUndefined();
    const web = lb(IPVS, '192.0.2.10');
    expect(web).toMatchObject({ trafficPolicy: 'Cluster', podTraffic: 'masquerade', capture: 'ipvs' });
    expect(web.service).toBeUndefined();
    expect(web.evidence).toEqual(
      expect.arrayContaining([
        'ipset KUBE-LOAD-BALANCER member 192.0.2.10,tcp:80',
        'ipvs-1.28.v4.save:18: -A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ',
        'ipset KUBE-LOAD-BALANCER-LOCAL does not have 192.0.2.10,tcp:80 (ipvs-1.28.v4.save:17)',
      ]),
    );
    const api = lb(IPVS, '192.0.2.20');
    expect(api).toMatchObject({ trafficPolicy: 'Local', podTraffic: 'exempt', capture: 'ipvs' });
    expect(api.evidence).toContain('ipset KUBE-LOAD-BALANCER-LOCAL has 192.0.2.20,tcp:80 (ipvs-1.28.v4.save:17)');
    expect(api.evidence.some((e) => e.includes('KUBE-NODE-PORT-LOCAL-TCP does not have'))).toBe(false);
  });

  it('maps NodePorts from the port bitmaps', () => {
    const ports = kubeNatFacts(IPVS).nodePorts;
    expect(ports.map((n) => [n.port, n.protocol, n.trafficPolicy])).toEqual([
      [31080, 'tcp', 'Local'],
      [30080, 'tcp', 'Cluster'],
    ]);
    const local =
      '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port with externalTrafficPolicy=local" -m set --match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN';
    const masq =
      '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ';
    expect(ports.map(nodePortEvidence)).toEqual([
      [
        `ipset KUBE-NODE-PORT-LOCAL-TCP member 31080 (ipvs-1.28.v4.save:20: ${local})`,
        `ipset KUBE-NODE-PORT-TCP member 31080 (ipvs-1.28.v4.save:21: ${masq})`,
      ],
      [`ipset KUBE-NODE-PORT-TCP member 30080 (ipvs-1.28.v4.save:21: ${masq})`],
    ]);
  });

  it('quotes a port set member as written when it is more than the port (hash:ip,port sets)', () => {
    const sets = IPVS.ipsets!.sets.map((s) =>
      s.name === 'KUBE-NODE-PORT-TCP'
        ? { ...s, type: 'hash:ip,port', members: s.members.map((m) => ({ ...m, entry: `10.0.1.11,tcp:${m.entry}` })) }
        : s,
    );
    const ports = kubeNatFacts({ ...IPVS, ipsets: { ...IPVS.ipsets!, sets } }).nodePorts;
    expect(ports.map((n) => n.port)).toEqual([31080, 30080]);
    expect(nodePortEvidence(ports[1]!)).toEqual([
      expect.stringMatching(
        /^ipset KUBE-NODE-PORT-TCP member 10\.0\.1\.11,tcp:30080 \(ipvs-1\.28\.v4\.save:21: -A KUBE-NODE-PORT /,
      ),
    ]);
  });

  it('without the ipsets there are no VIPs to look at (IPVS keeps them only in KUBE-LOAD-BALANCER)', () => {
    const { ipsets: _dropped, ...noSets } = IPVS;
    const f = kubeNatFacts(noSets);
    expect(f.mode).toBe('ipvs');
    expect(f.loadBalancers).toEqual([]);
  });
});

describe('kubeNatFacts: other nodes', () => {
  it('reports "none" when the nat table has no kube-proxy chains (nftables-mode kube-proxy, eBPF replacements)', () => {
    const f = kubeNatFacts(natOf(':PREROUTING ACCEPT [0:0]\n-A PREROUTING -j ACCEPT'));
    expect(f.mode).toBe('none');
    expect(f.modeEvidence).toEqual(['variant: no KUBE-SERVICES chain in the nat table']);
  });

  it('reports "mixed" when iptables-mode and IPVS-mode chains coexist (leftovers after a mode switch)', () => {
    const ipvsNat = IPVS.v4!.tables.find((t) => t.name === 'nat')!;
    const mixed: NatSnapshot = { ...NEW, v6: { ...IPVS.v4!, family: 6, tables: [ipvsNat] } };
    expect(kubeNatFacts(mixed).mode).toBe('mixed');
  });
});
