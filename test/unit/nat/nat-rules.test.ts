// The nat table reader (nat-rules.ts) over the save output's bytes, as the agent reads it, gives
// exactly the facts of the same reader over the parsed dump (snapshot, bundles), for the captured
// fixtures, for kube-proxy's rules at scale, and for malformed input (one bad line is skipped as
// the full parser skips it).
import { describe, expect, it } from 'vitest';
import { syntheticCluster } from '../../../bench/agent-cluster.js';
import { kubeProxyRules } from '../../../bench/kube-proxy-rules.js';
import { runCommand } from '../../../src/kernel/nat/command.js';
import { parseIpsetSave } from '../../../src/kernel/nat/ipset.js';
import { parseIptablesSave } from '../../../src/kernel/nat/iptables-save.js';
import { mayContain } from '../../../src/kernel/nat/lines.js';
import { NatRules } from '../../../src/kernel/nat/nat-rules.js';
import type { IpsetSet, NatFamily } from '../../../src/kernel/nat/types.js';
import { FILTER_DROP_CHAINS, type KubeNatFacts, natRulesFacts } from '../../../src/kubeproxy/facts.js';
import { fixture } from './fixtures.js';

const full = (text: string, family: NatFamily = 4, sets: IpsetSet[] = []): KubeNatFacts =>
  natRulesFacts([NatRules.ofDump(parseIptablesSave(text, { source: 's', family }), FILTER_DROP_CHAINS)], sets);
const streamed = (text: string, family: NatFamily = 4, sets: IpsetSet[] = []): KubeNatFacts =>
  natRulesFacts([new NatRules(Buffer.from(text), { source: 's', family, filterChains: FILTER_DROP_CHAINS })], sets);

const OLD = fixture('iptables-1.21-legacy.v4.save');

describe('NatRules: the same facts from the bytes as from the parsed dump', () => {
  it('for every captured fixture (iptables before/after 1.24, IPv6, IPVS with its ipsets)', () => {
    const sets = parseIpsetSave(fixture('ipvs-1.28.ipset.save'), 'ipset save').sets;
    for (const [name, family] of [
      ['iptables-1.21-legacy.v4.save', 4],
      ['iptables-1.29-nft.v4.save', 4],
      ['iptables-1.29-nft.v6.save', 6],
      ['ipvs-1.28.v4.save', 4],
    ] as const) {
      const want = full(fixture(name), family, sets);
      expect(want.mode).not.toBe('none');
      expect(streamed(fixture(name), family, sets), name).toEqual(want);
    }
  });

  it("for kube-proxy's rules of 300 LB Services (KUBE-SERVICES through the destination index)", () => {
    const text = kubeProxyRules(syntheticCluster(300, 1200).list.items).text;
    const want = full(text);
    expect(want.loadBalancers.length).toBeGreaterThan(300);
    expect(streamed(text)).toEqual(want);
  });

  it('skips what the full parser skips: bad quotes, counters, undeclared chains, a second nat table, truncation', () => {
    const variants = [
      OLD.replace(
        /^(-A KUBE-FW-67NZLRHBNDSAWJRO .*KUBE-MARK-MASQ)$/m,
        '-A KUBE-FW-67NZLRHBNDSAWJRO -m comment --comment "unterminated -j KUBE-MARK-MASQ',
      ),
      OLD.replace(/^-A KUBE-SERVICES /gm, '[12:345] -A KUBE-SERVICES '),
      OLD.replace(/^:KUBE-XLB-RUKNB3TURLFC6SGL .*\n/m, ''),
      OLD.replace(
        /^(-A KUBE-XLB-RUKNB3TURLFC6SGL -s 10.244.0.0\/16 -m comment --comment )"Redirect pods/m,
        '$1Redirect" pods',
      ),
      `${OLD}\n*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j ACCEPT\nCOMMIT\n`,
      OLD.slice(0, OLD.indexOf('-A KUBE-SVC-')),
      OLD.slice(0, OLD.indexOf(':KUBE-SERVICES') + 20),
    ];
    for (const v of variants) expect(streamed(v)).toEqual(full(v));
    // The quote-split "Redirect pods" comment still names the pod CIDR (mayContain looks through quotes).
    expect(streamed(variants[3]!).podSelectors[4]).toEqual({ cidrs: ['10.244.0.0/16'], interfaces: [] });
  });

  it('reads a capture cut inside the nat table: the rules before the cut, and a warning that says so', () => {
    const cut = OLD.slice(0, OLD.indexOf('-A KUBE-SERVICES -d 192.0.2.20/32'));
    const rules = new NatRules(Buffer.from(cut), { source: 's', family: 4, filterChains: FILTER_DROP_CHAINS });
    expect(rules.warnings).toContainEqual(expect.stringMatching(/input ends inside table 'nat' \(no COMMIT\)/));
    expect(streamed(cut).loadBalancers.map((f) => `${f.vip}:${f.port}`)).toEqual(['192.0.2.10:80']);
    expect(streamed(OLD).loadBalancers.map((f) => `${f.vip}:${f.port}`)).toEqual(['192.0.2.10:80', '192.0.2.20:80']);
  });

  it('skips a malformed rule line and keeps the rest of its chain, in order', () => {
    const bad = OLD.replace(/^(-A KUBE-SERVICES -d 192\.0\.2\.20\/32 .*)$/m, '$1 -m comment --comment "unterminated');
    const rules = new NatRules(Buffer.from(bad), { source: 's', family: 4, filterChains: FILTER_DROP_CHAINS });
    const lines = [...rules.rules('KUBE-SERVICES')].map((r) => r.line);
    expect(lines).not.toContain(73);
    expect(lines).toEqual([...lines].sort((a, b) => a - b));
    expect(lines.length).toBe(
      [
        ...new NatRules(Buffer.from(OLD), { source: 's', family: 4, filterChains: FILTER_DROP_CHAINS }).rules(
          'KUBE-SERVICES',
        ),
      ].length - 1,
    );
    expect(streamed(bad).loadBalancers.map((f) => f.vip)).toEqual(['192.0.2.10']);
  });

  it("refuses input that is no save output with the full parser's error", () => {
    const text = 'create KUBE-LOAD-BALANCER hash:ip,port\nadd KUBE-LOAD-BALANCER 192.0.2.1,tcp:80\n';
    expect(() => new NatRules(Buffer.from(text), { source: 's', family: 4, filterChains: FILTER_DROP_CHAINS })).toThrow(
      /^s:2: no table found; not iptables-save output \(s:1: unrecognised line/,
    );
  });

  it('mayContain sees a word through its quotes and escapes, and only then', () => {
    expect(mayContain('-m comment --comment "pod traffic for x"', 'pod traffic for ')).toBe(true);
    expect(mayContain('-m comment --comment pod" traffic "for', 'pod traffic for')).toBe(true);
    expect(mayContain('-m comment --comment "pod traffic fur x"', 'pod traffic for ')).toBe(false);
  });
});

describe('runCommand: a bounded output', () => {
  it('stops a command that prints more than the bound, and says so', async () => {
    const r = await runCommand('head', ['-c', '1000000', '/dev/zero'], { timeoutMs: 10_000, maxBytes: 64 * 1024 });
    expect(r).toEqual({
      ok: false,
      reason: 'printed more than 65536 bytes (the bound on what the NAT reader keeps); stopped reading it',
    });
    const ok = await runCommand('head', ['-c', '1000', '/dev/zero'], { timeoutMs: 10_000, maxBytes: 64 * 1024 });
    expect(ok.ok && ok.stdout.length).toBe(1000);
  });

  it('keeps every byte of an output that arrives in many chunks, in a buffer of its exact size', async () => {
    // 3 MB of a pattern that shows a misplaced or lost chunk: each line carries its own number.
    const lines = 150_000;
    const r = await runCommand('seq', ['-w', '1', String(lines)], { timeoutMs: 10_000, maxBytes: 64 * 1024 * 1024 });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const want = Array.from({ length: lines }, (_, i) => `${String(i + 1).padStart(6, '0')}\n`).join('');
    expect(r.stdout.length).toBe(want.length);
    expect(r.stdout.buffer.byteLength).toBe(r.stdout.length);
    expect(r.stdout.toString('latin1') === want).toBe(true);
  });
});
