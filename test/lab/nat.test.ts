// NAT reader against the real kernel: the captured kube-proxy rule sets and
// ipsets are restored into fresh network namespaces with both xtables backends,
// and readNat must give back exactly those rules and sets, choosing the backend
// that holds kube-proxy's chains.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { parseIpsetSave } from '../../src/kernel/nat/ipset.js';
import type { IpsetDump, IptablesDump } from '../../src/kernel/nat/types.js';
import { kubeNatFacts } from '../../src/kubeproxy/facts.js';
import { readNatFacts } from '../../src/kubeproxy/read-facts.js';
import { isRoot, Netns } from '../support/netns.js';
import { fixture, parseFixture } from '../unit/nat/fixtures.js';

const OLD = 'iptables-1.21-legacy.v4.save';
const NEW4 = 'iptables-1.29-nft.v4.save';
const NEW6 = 'iptables-1.29-nft.v6.save';
const IPVS4 = 'ipvs-1.28.v4.save';
const IPSET = 'ipvs-1.28.ipset.save';
/** 300 plain filter rules: more rule lines than the KUBE fixtures, none of kubelet's chains. */
const PLAIN = `*filter\n:INPUT ACCEPT [0:0]\n${'-A INPUT -s 198.51.100.0/24 -j DROP\n'.repeat(300)}COMMIT\n`;

/** Feeds `input` to a restore command (iptables-*-restore, ipset restore) inside the namespace. */
function restore(ns: Netns, cmd: string, input: string, ...args: string[]): void {
  const r = spawnSync('ip', ['netns', 'exec', ns.name, cmd, ...args], { input, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} in ${ns.name} exited ${r.status}: ${r.stderr.trim()}`);
}

/** Tables with their chains and rules as (chain, spec), in order: what must survive the round trip. */
function rulesOf(d: IptablesDump | undefined) {
  return (d?.tables ?? [])
    .map((t) => ({
      table: t.name,
      chains: t.chains.map((c) => c.name).sort(),
      rules: t.rules.map((r) => `${r.chain} ${r.spec}`),
    }))
    .sort((a, b) => a.table.localeCompare(b.table));
}

/** Sets without the kernel-chosen initval, members in a stable order. */
function setsOf(d: IpsetDump | undefined) {
  return (d?.sets ?? [])
    .map((s) => {
      const { initval: _random, ...options } = s.options;
      return { name: s.name, type: s.type, family: s.family, options, members: s.members.map((m) => m.entry).sort() };
    })
    .sort((a, b) => a.name.localeCompare(b.name));
}

if (!isRoot)
  console.warn(
    'test/lab/nat.test.ts: skipped, needs root (creates network namespaces and loads iptables rules into them)',
  );

describe.skipIf(!isRoot)('readNat on a real kernel (both xtables backends, ipset; needs root)', () => {
  const made: Netns[] = [];
  const netns = (): Netns => {
    const ns = Netns.create('cbn-nat');
    made.push(ns);
    return ns;
  };
  afterEach(() => made.splice(0).forEach((ns) => ns.delete()));
  afterAll(() => Netns.deleteAll());

  it('1.29 rules in nft (IPv4 + IPv6), junk in legacy: picks nft and returns exactly the restored rules', async () => {
    const ns = netns();
    restore(ns, 'iptables-nft-restore', fixture(NEW4));
    restore(ns, 'ip6tables-nft-restore', fixture(NEW6));
    restore(ns, 'iptables-legacy-restore', PLAIN);
    const { nat, sources } = await readNatFacts({ netns: ns.name });
    expect(sources.find((s) => s.source === 'nat')).toMatchObject({ available: true });
    expect(nat!.backend).toBe('nft');
    expect(nat!.backendChoice.reason).toMatch(/chain is in the nft tables/);
    expect(nat!.backendChoice.legacy).toMatchObject({ ruleLines: 300, kubeRuleLines: 0, kubeletChains: false });
    expect(rulesOf(nat!.v4)).toEqual(rulesOf(parseFixture(NEW4)));
    expect(rulesOf(nat!.v6)).toEqual(rulesOf(parseFixture(NEW6, 6)));
    expect(nat!.v4!.warnings).toEqual([]);
    const facts = kubeNatFacts(nat!);
    expect(facts.loadBalancers.map((l) => [l.vip, l.trafficPolicy, l.podTraffic])).toEqual([
      ['192.0.2.10', 'Cluster', 'masquerade'],
      ['192.0.2.20', 'Local', 'exempt'],
      ['192.0.2.30', 'Cluster', 'exempt'],
      ['2001:db8:1b::20', 'Local', 'exempt'],
    ]);
    expect(facts.loadBalancers[1]!.evidence[0]).toMatch(
      /^iptables-nft-save:\d+: -A KUBE-SERVICES -d 192\.0\.2\.20\/32 /,
    );
  });

  it('1.21 rules in legacy, a few rules in nft: picks legacy and returns exactly the restored rules', async () => {
    const ns = netns();
    restore(ns, 'iptables-legacy-restore', fixture(OLD));
    restore(ns, 'iptables-nft-restore', '*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n');
    const { nat } = await readNatFacts({ netns: ns.name });
    expect(nat!.backend).toBe('legacy');
    expect(nat!.backendChoice.reason).toMatch(/chain is in the legacy tables/);
    expect(nat!.backendChoice.nft).toMatchObject({ ruleLines: 1, kubeletChains: false });
    expect(rulesOf(nat!.v4)).toEqual(rulesOf(parseFixture(OLD)));
    expect(kubeNatFacts(nat!).iptablesGeneration).toBe('pre-1.24');
  });

  it('a re-read of the same rules is unchanged (nothing parsed); a changed rule is read again', async () => {
    const ns = netns();
    restore(ns, 'iptables-legacy-restore', fixture(OLD));
    const first = await readNatFacts({ netns: ns.name });
    expect(first.nat!.backend).toBe('legacy');
    // The save commands stamp their output with the time to the second.
    await new Promise((r) => setTimeout(r, 1100));
    const again = await readNatFacts({ netns: ns.name, unchangedSince: first.digest });
    expect(again).toEqual({ sources: [], digest: first.digest, unchanged: true });
    // The agent's read digests the output a line at a time as it streams: the same digest.
    expect(await readNatFacts({ netns: ns.name, factsOnly: true, unchangedSince: first.digest })).toEqual(again);
    restore(
      ns,
      'iptables-legacy-restore',
      '*nat\n-A KUBE-SERVICES -d 10.96.0.99/32 -p tcp -m tcp --dport 80 -j ACCEPT\nCOMMIT\n',
      '--noflush',
    );
    const changed = await readNatFacts({ netns: ns.name, unchangedSince: first.digest });
    expect(changed.unchanged).toBeUndefined();
    expect(changed.digest).not.toBe(first.digest);
    const natRules = (r: typeof first) => r.nat!.v4!.tables.find((t) => t.name === 'nat')!.rules.length;
    expect(natRules(changed)).toBe(natRules(first) + 1);
  });

  it('factsOnly keeps the same kube-proxy facts and none of the parsed rules (the agent)', async () => {
    const ns = netns();
    restore(ns, 'iptables-nft-restore', fixture(NEW4));
    restore(ns, 'ip6tables-nft-restore', fixture(NEW6));
    const full = await readNatFacts({ netns: ns.name });
    const slim = await readNatFacts({ netns: ns.name, factsOnly: true });
    expect(slim.nat!.v4).toBeUndefined();
    expect(slim.nat!.v6).toBeUndefined();
    expect(slim.nat!.ipsets).toBeUndefined();
    expect(slim.nat!.backend).toBe('nft');
    expect(slim.digest).toBe(full.digest);
    expect(kubeNatFacts(slim.nat!)).toEqual(kubeNatFacts(full.nat!));
    expect(kubeNatFacts(slim.nat!).loadBalancers).toHaveLength(4);
  });

  it('IPVS rules and ipsets: returns exactly the restored sets and members, by netns path too', async () => {
    const ns = netns();
    restore(ns, 'ipset', fixture(IPSET), 'restore');
    restore(ns, 'iptables-nft-restore', fixture(IPVS4));
    for (const target of [ns.name, ns.path]) {
      const { nat, sources } = await readNatFacts({ netns: target });
      expect(sources.find((s) => s.source === 'ipset')).toMatchObject({ available: true });
      expect(nat!.backend).toBe('nft');
      expect(setsOf(nat!.ipsets)).toEqual(setsOf(parseIpsetSave(fixture(IPSET), IPSET)));
      expect(rulesOf(nat!.v4)).toEqual(rulesOf(parseFixture(IPVS4)));
      const facts = kubeNatFacts(nat!);
      expect(facts.mode).toBe('ipvs');
      expect(kubeNatFacts((await readNatFacts({ netns: target, factsOnly: true })).nat)).toEqual(facts);
      expect(facts.loadBalancers.map((l) => [l.vip, l.trafficPolicy, l.podTraffic, l.capture])).toEqual(
        expect.arrayContaining([
          ['192.0.2.10', 'Cluster', 'masquerade', 'ipvs'],
          ['192.0.2.20', 'Local', 'exempt', 'ipvs'],
        ]),
      );
    }
  });

  it('the same rules in both backends with no kubelet chain anywhere: more rule lines win', async () => {
    const ns = netns();
    const noHint = fixture(OLD)
      .replace(/^:KUBE-KUBELET-CANARY .*\n/gm, '')
      .replace(/^-A KUBE-KUBELET-CANARY .*\n/gm, '');
    restore(ns, 'iptables-legacy-restore', noHint);
    restore(ns, 'iptables-nft-restore', PLAIN);
    const { nat } = await readNatFacts({ netns: ns.name });
    expect(nat!.backend).toBe('nft');
    expect(nat!.backendChoice.reason).toMatch(/^no kubelet hint chain; nft holds more rules: legacy 75 rule lines/);
    // The legacy side still holds kube-proxy's rules: the snapshot says so.
    expect(nat!.warnings).toEqual([
      'the legacy backend also holds 65 KUBE-* rule lines (stale rules from an earlier kube-proxy?)',
    ]);
  });

  it('an output over the bound makes the source unavailable with a reason that says so, the ipsets still read', async () => {
    const ns = netns();
    restore(ns, 'iptables-nft-restore', fixture(NEW4));
    const { nat, sources } = await readNatFacts({ netns: ns.name, maxOutputBytes: 4096 });
    expect(nat).toBeUndefined();
    expect(sources[0]).toMatchObject({
      source: 'nat',
      available: false,
      reason:
        'iptables-nft-save: printed more than 4096 bytes (the bound on what the NAT reader keeps); stopped reading it',
    });
    expect(sources[1]).toMatchObject({ source: 'ipset', available: true });
  });

  it('reports a namespace that does not exist, and a missing privilege, in one line each', async () => {
    const missing = await readNatFacts({ netns: 'cbn-nat-does-not-exist' });
    expect(missing.nat).toBeUndefined();
    expect(missing.sources[0]!.reason).toMatch(
      /^iptables-nft-save: Cannot open network namespace "cbn-nat-does-not-exist"/,
    );

    const ns = netns();
    const reader = fileURLToPath(new URL('../../src/kernel/nat/read.ts', import.meta.url));
    const script = `import { readNat } from ${JSON.stringify(reader)}; process.stdout.write(JSON.stringify(await readNat({ netns: process.argv[1] })));`;
    const r = spawnSync(
      'setpriv',
      [
        '--reuid=65534',
        '--regid=65534',
        '--clear-groups',
        process.execPath,
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        script,
        ns.path,
      ],
      { encoding: 'utf8', timeout: 60_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const asNobody = JSON.parse(r.stdout) as Awaited<ReturnType<typeof readNatFacts>>;
    expect(asNobody.nat).toBeUndefined();
    for (const s of asNobody.sources) {
      expect(s.available).toBe(false);
      expect(s.reason).toMatch(/^permission denied \(needs root or CAP_NET_ADMIN\): /);
    }
  });
});
