// The kube-proxy walk must stay cheap on any nat table a node may hold: chains that jump to the
// same chain more than once, cycles, and corrupt prefixes (fuzz case kept in fixtures/nat/fuzz).
import { describe, expect, it } from 'vitest';
import { parseIpsetSave } from '../../../src/kernel/nat/ipset.js';
import { parseIptablesSave } from '../../../src/kernel/nat/iptables-save.js';
import { NatRules } from '../../../src/kernel/nat/nat-rules.js';
import { FILTER_DROP_CHAINS, natRulesFacts } from '../../../src/kubeproxy/facts.js';
import { walkNat } from '../../../src/kubeproxy/walk.js';
import { fixture } from './fixtures.js';

const VIP =
  '-A KUBE-SERVICES -d 192.0.2.10/32 -p tcp -m comment --comment "shop/web:http loadbalancer IP" -m tcp --dport 80 -j C0';

/** `n` chains, each jumping twice to the next (one jump under a mark: 'maybe'); the last DNATs. */
function ladder(n: number): string {
  const lines = ['*nat', ':KUBE-SERVICES - [0:0]'];
  for (let i = 0; i < n; i++) lines.push(`:C${i} - [0:0]`);
  lines.push(VIP);
  for (let i = 0; i + 1 < n; i++) lines.push(`-A C${i} -m mark --mark 0x1 -j C${i + 1}`, `-A C${i} -j C${i + 1}`);
  lines.push(`-A C${n - 1} -j KUBE-MARK-MASQ`, `-A C${n - 1} -j RETURN`, 'COMMIT', '');
  return lines.join('\n');
}

function timed<T>(f: () => T): { value: T; ms: number } {
  const t0 = performance.now();
  const value = f();
  return { value, ms: performance.now() - t0 };
}

const factsOf = (text: string, sets = [] as ReturnType<typeof parseIpsetSave>['sets']) =>
  natRulesFacts([NatRules.ofDump(parseIptablesSave(text, { source: 't', family: 4 }), FILTER_DROP_CHAINS)], sets);

describe('the NAT walk: cost bounded by rules, not by paths', () => {
  it('32 chains each jumping twice to the next: each chain walked once per certainty, well under 1 s', () => {
    const text = ladder(32);
    const chains = NatRules.ofDump(parseIptablesSave(text, { source: 't', family: 4 }), FILTER_DROP_CHAINS);
    const { value: walk, ms } = timed(() =>
      walkNat({ chains, sets: new Map(), pod: { cidrs: [], interfaces: [] } }, 'KUBE-SERVICES', {
        dst: '192.0.2.10',
        protocol: 'tcp',
        dport: 80,
      }),
    );
    expect(ms).toBeLessThan(250);
    // Every chain entered certainly (the unmarked jumps) and, below C0, under the mark too.
    expect(walk.visited.length).toBe(1 + 32 + 31);
    expect(walk.masq.some((s) => s.certain)).toBe(true);
    const { value: facts, ms: factsMs } = timed(() => factsOf(text));
    expect(factsMs).toBeLessThan(500);
    expect(facts.loadBalancers[0]).toMatchObject({
      vip: '192.0.2.10',
      podTraffic: 'masquerade',
      capture: 'not-captured',
    });
    // The bytes read gives the same facts.
    expect(
      JSON.stringify(
        natRulesFacts(
          [new NatRules(Buffer.from(text), { source: 't', family: 4, filterChains: FILTER_DROP_CHAINS })],
          [],
        ),
      ),
    ).toBe(JSON.stringify(facts));
  });

  it('a cycle (C0 -> C1 -> C0) ends as a loop: capture unknown, bounded', () => {
    const text = [
      '*nat',
      ':KUBE-SERVICES - [0:0]',
      ':C0 - [0:0]',
      ':C1 - [0:0]',
      VIP,
      '-A C0 -j C1',
      '-A C0 -j C1',
      '-A C1 -j KUBE-MARK-MASQ',
      '-A C1 -j C0',
      '-A C1 -j C0',
      'COMMIT',
      '',
    ].join('\n');
    const { value: facts, ms } = timed(() => factsOf(text));
    expect(ms).toBeLessThan(500);
    expect(facts.loadBalancers[0]).toMatchObject({ podTraffic: 'masquerade', capture: 'unknown' });
  });

  it('the fuzz case with prefix lengths like /99999999999999999999 reads in well under 1 s', () => {
    const text = fixture('fuzz/huge-prefix.v4.save');
    const sets = parseIpsetSave(fixture('ipvs-1.28.ipset.save'), 's').sets;
    const { value: facts, ms } = timed(() => factsOf(text, sets));
    expect(ms).toBeLessThan(500);
    expect(facts.loadBalancers.length).toBe(2);
  });
});
