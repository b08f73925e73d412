import { describe, expect, it } from 'vitest';
import { formatNatSummary } from '../../../src/kubeproxy/summary.js';
import { snapshotOf } from './fixtures.js';

describe('formatNatSummary', () => {
  it('shows backend, chain counts, LB rules and what happens to pod traffic per VIP', () => {
    const lines = formatNatSummary(
      snapshotOf('nft', { v4: 'iptables-1.29-nft.v4.save', v6: 'iptables-1.29-nft.v6.save' }),
    );
    expect(lines).toEqual([
      "backend: nft (kubelet's KUBE-IPTABLES-HINT/KUBE-KUBELET-CANARY chain is in the nft tables; legacy 0 rule lines (0 KUBE-*), nft 90 (88 KUBE-*))",
      'IPv4: 3 tables; nat 25 chains (21 KUBE-*: SVC 4, SEP 6, EXT 3, SVL 1, FW 1), 53 rules, 4 LB rules',
      'IPv6: 2 tables; nat 14 chains (10 KUBE-*: SVC 1, SEP 1, EXT 1, SVL 1), 20 rules, 1 LB rules',
      'kube-proxy: iptables mode (1.24+ chain names)',
      '  LB 192.0.2.10:80/tcp shop/web:http: ETP=Cluster, pod traffic masqueraded, dnat',
      '  LB 192.0.2.20:80/tcp shop/api:http: ETP=Local, pod traffic NOT masqueraded, dnat',
      '  LB 192.0.2.30:443/tcp shop/admin:https: ETP=Cluster, pod traffic dropped by loadBalancerSourceRanges',
      '  LB [2001:db8:1b::20]:80/tcp shop/api6:http: ETP=Local, pod traffic NOT masqueraded, dnat',
      '  NodePorts: 4 (2 with ETP=Local)',
    ]);
  });

  it('lists LB ipsets in IPVS mode and the parse warnings', () => {
    const snap = snapshotOf('nft', { v4: 'ipvs-1.28.v4.save', ipset: 'ipvs-1.28.ipset.save' });
    snap.warnings.push('the legacy backend also holds 3 KUBE-* rule lines (stale rules from an earlier kube-proxy?)');
    const lines = formatNatSummary(snap);
    expect(lines).toContain('ipsets: 17 sets (17 KUBE-*); LB sets: KUBE-LOAD-BALANCER-LOCAL 1, KUBE-LOAD-BALANCER 2');
    expect(lines).toContain('kube-proxy: ipvs mode');
    expect(lines).toContain('  LB 192.0.2.20:80/tcp: ETP=Local, pod traffic NOT masqueraded, ipvs');
    expect(lines[lines.length - 1]).toBe(
      'warning: the legacy backend also holds 3 KUBE-* rule lines (stale rules from an earlier kube-proxy?)',
    );
  });
});
