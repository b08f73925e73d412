// loadBalancerSourceRanges in kube-proxy's two iptables layouts, walked for a packet from a pod: the walk says a pod
// is dropped only when it knows; a rule that may not apply before the drop makes the drop uncertain.
import { describe, expect, it } from 'vitest';
import { NatRules } from '../../../src/kernel/nat/nat-rules.js';
import { natRulesFacts } from '../../../src/kubeproxy/facts.js';

const COMMENT = '-m comment --comment "ns/svc:http loadbalancer IP"';

/** Before kube-proxy 1.25: KUBE-FW-X lets the ranges on to the Service and marks the rest for dropping. */
function before125(extra = ''): string {
  return `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-FW-X - [0:0]
:KUBE-SVC-X - [0:0]
:KUBE-MARK-DROP - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SEP-A - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 192.0.2.10/32 -p tcp ${COMMENT} -m tcp --dport 80 -j KUBE-FW-X
-A KUBE-FW-X ${COMMENT} -j KUBE-MARK-MASQ
-A KUBE-FW-X -s 10.0.0.0/8 ${COMMENT} -j KUBE-SVC-X
-A KUBE-FW-X ${COMMENT} -j KUBE-MARK-DROP
${extra}-A KUBE-SVC-X -j KUBE-SEP-A
-A KUBE-SEP-A -p tcp -m tcp -j DNAT --to-destination 10.0.1.5:8080
COMMIT
`;
}

/** kube-proxy 1.25 and later, IPv6: KUBE-FW-X lets the range on to KUBE-EXT-X; KUBE-PROXY-FIREWALL drops the rest. */
function since125v6(range: string): string {
  return `*filter
:KUBE-PROXY-FIREWALL - [0:0]
-A KUBE-PROXY-FIREWALL -d 2001:db8::10/128 -p tcp -m comment --comment "ns/svc:http traffic not accepted by KUBE-FW-X" -m tcp --dport 80 -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-FW-X - [0:0]
:KUBE-EXT-X - [0:0]
:KUBE-SVC-X - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SEP-A - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 2001:db8::10/128 -p tcp ${COMMENT} -m tcp --dport 80 -j KUBE-FW-X
-A KUBE-FW-X -s ${range} ${COMMENT} -j KUBE-EXT-X
-A KUBE-FW-X -m comment --comment "other traffic to ns/svc:http will be dropped by KUBE-PROXY-FIREWALL"
-A KUBE-EXT-X -m comment --comment "masquerade traffic for ns/svc:http external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-X -j KUBE-SVC-X
-A KUBE-SVC-X -j KUBE-SEP-A
-A KUBE-SEP-A -p tcp -m tcp -j DNAT --to-destination [fd00::5]:8080
COMMIT
`;
}

function lbFact(save: string, family: 4 | 6) {
  const rules = new NatRules(Buffer.from(save), {
    source: family === 4 ? 'iptables-save' : 'ip6tables-save',
    family,
    filterChains: ['KUBE-PROXY-FIREWALL'],
  });
  return natRulesFacts([rules], []).loadBalancers[0]!;
}

describe('source ranges, walked for a packet from a pod', () => {
  it('before 1.25, pod CIDR unknown: the range rule may not apply, so the drop after it is not certain', () => {
    const lb = lbFact(before125(), 4);
    expect(lb.capture).toBe('unknown');
    expect(lb.sourceRangeDrop?.certain).toBe(false);
  });

  it('before 1.25, pods inside the range (from the masquerade rule): the Service takes them', () => {
    const lb = lbFact(
      before125('-A KUBE-SVC-X ! -s 10.0.0.0/16 -d 10.96.0.9/32 -p tcp -m tcp --dport 80 -j KUBE-MARK-MASQ\n'),
      4,
    );
    expect(lb.capture).toBe('dnat');
    expect(lb.sourceRangeDrop).toBeUndefined();
  });

  it('an IPv6 /32 is a range like any other, not one host', () => {
    for (const range of ['2001:db8:ffff::/31', '2001:db8:ffff::/32', '2001:db8:ffff::/33']) {
      const lb = lbFact(since125v6(range), 6);
      expect([range, lb.capture, lb.sourceRangeDrop?.certain]).toEqual([range, 'unknown', false]);
    }
    // A single IPv6 host is no client pod: the rest are dropped for certain.
    expect(lbFact(since125v6('2001:db8:ffff::7/128'), 6).sourceRangeDrop?.certain).toBe(true);
  });
});
