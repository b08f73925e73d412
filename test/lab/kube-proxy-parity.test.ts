// iptables and nftables mode must read the same datapath the same way (issue 38): kube-proxy's
// rules for the nftables lab's Services, in iptables mode (1.25+ format, test/support/kube-iptables.ts,
// loaded by iptables-nft-restore) and in nftables mode's v1.36 layout (the hairpin-connections set,
// marks set in the rule, numgen DNAT maps: test/support/kube-nft.ts), are loaded into the lab's node
// namespace; a pod's connections show what the kernel does, and the readers must say the same:
// loadBalancerSourceRanges drops, ETP=Local "no local endpoints" drops, pod masquerade.
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NftSnapshot } from '../../src/kernel/nft/types.js';
import { type KubeNatFacts, kubeNatFacts, type LoadBalancerFact } from '../../src/kubeproxy/facts.js';
import { readNatFacts } from '../../src/kubeproxy/read-facts.js';
import { formatNatSummary } from '../../src/kubeproxy/summary.js';
import { nft } from '../../src/source/nft.js';
import { kubeProxyIptables } from '../support/kube-iptables.js';
import type { NftService } from '../support/kube-nft.js';
import { isRoot } from '../support/netns.js';
import { createNftLab, NFT_LAB as L, type NftLab } from '../support/nft-lab.js';
import { LAB_SERVICES } from '../support/nft-services.js';

const hasNft = spawnSync('nft', ['--version']).status === 0;
const lbIp = (n: number): string => `203.0.113.${n}`;
const STICKY: NftService = {
  ...LAB_SERVICES[0]!,
  name: 'sticky',
  clusterIP: '10.96.0.16',
  nodePort: 30016,
  lbIPs: [lbIp(16)],
  affinityTimeout: 10800,
};

describe.skipIf(!isRoot || !hasNft)(
  'source ranges and ETP=Local drops read alike in iptables and nftables mode (real kernel; needs root)',
  () => {
    let lab: NftLab;
    beforeAll(async () => {
      lab = await createNftLab('cbp-');
    }, 60_000);
    afterAll(() => lab?.destroy());

    const fact = (f: KubeNatFacts, n: number): LoadBalancerFact => {
      const found = f.loadBalancers.find((l) => l.vip === lbIp(n) && l.port === 80);
      if (!found) throw new Error(`no fact for ${lbIp(n)}:80`);
      return found;
    };

    describe('iptables mode (1.25+ rules, nft backend)', () => {
      let full: KubeNatFacts;
      let factsOnly: KubeNatFacts;
      beforeAll(async () => {
        lab.node.sh('nft delete table ip kube-proxy 2>/dev/null || true; conntrack -F 2>/dev/null || true');
        const r = spawnSync('ip', ['netns', 'exec', lab.node.name, 'iptables-nft-restore'], {
          input: kubeProxyIptables(LAB_SERVICES, L.podCidr),
          encoding: 'utf8',
        });
        if (r.status !== 0) throw new Error(`iptables-nft-restore: ${r.stderr}`);
        full = kubeNatFacts((await readNatFacts({ netns: lab.node.name })).nat);
        factsOnly = kubeNatFacts((await readNatFacts({ netns: lab.node.name, factsOnly: true })).nat);
      }, 30_000);
      afterAll(() =>
        lab.node.sh(
          'iptables-nft -t nat -F; iptables-nft -t nat -X; iptables-nft -F; iptables-nft -X; conntrack -F 2>/dev/null || true',
        ),
      );

      it('source ranges without the pod CIDR: the pod times out, and the reader says dropped, quoting KUBE-FW and KUBE-PROXY-FIREWALL', async () => {
        expect(await lab.connect(lab.pod, lbIp(15), 80)).toBe('timeout');
        for (const f of [full, factsOnly]) {
          expect(fact(f, 15)).toMatchObject({ capture: 'dropped', sourceRangeDrop: { certain: true } });
          expect(fact(f, 15).sourceRangeDrop!.evidence).toEqual([
            expect.stringMatching(/: -A KUBE-FW-\w+ -s 198\.51\.100\.0\/24 .* -j KUBE-EXT-\w+$/),
            expect.stringMatching(
              /: -A KUBE-FW-\w+ -m comment --comment "other traffic to shop\/ranged:http will be dropped by KUBE-PROXY-FIREWALL"$/,
            ),
            expect.stringMatching(
              /^iptables-nft-save:\d+: -A KUBE-PROXY-FIREWALL -d 203\.0\.113\.15\/32 .* -j DROP \(filter table\)$/,
            ),
          ]);
        }
        expect(formatNatSummary((await readNatFacts({ netns: lab.node.name })).nat!)).toContain(
          '  LB 203.0.113.15:80/tcp shop/ranged:http: ETP=Cluster, pod traffic dropped by loadBalancerSourceRanges',
        );
      });

      it('ETP=Local without local endpoints: the pod is short-circuited to the remote endpoint, and KUBE-EXTERNAL-SERVICES is read as the no-local-endpoints drop', async () => {
        expect(await lab.connect(lab.pod, lbIp(12), 80)).toBe(`remote-ep ${L.pod}`);
        for (const f of [full, factsOnly]) {
          expect(fact(f, 12)).toMatchObject({
            trafficPolicy: 'Local',
            podTraffic: 'exempt',
            capture: 'dnat',
            noEndpoints: { verdict: 'drop', preDnatChecks: [] },
          });
          expect(fact(f, 12).noEndpoints!.evidence).toEqual([
            expect.stringMatching(
              /KUBE-EXTERNAL-SERVICES -d 203\.0\.113\.12\/32 .*"shop\/far:http has no local endpoints".* -j DROP \(filter table\)$/,
            ),
          ]);
          expect(fact(f, 12).sourceRangeDrop).toBeUndefined();
          // With local endpoints and without source ranges there is neither.
          expect(fact(f, 11).noEndpoints).toBeUndefined();
          expect(fact(f, 10).sourceRangeDrop).toBeUndefined();
        }
      });
    });

    describe('nftables mode, kube-proxy v1.36 layout', () => {
      let facts: KubeNatFacts;
      let snap: NftSnapshot;
      beforeAll(async () => {
        lab.load('v1.36', [...LAB_SERVICES, STICKY]);
        const r = await nft.live!({ netns: `/var/run/netns/${lab.node.name}` }).read();
        if (r.state !== 'up') throw new Error(`nft source ${r.state}`);
        snap = r.value;
        facts = kubeNatFacts((await readNatFacts({ netns: lab.node.name })).nat, snap);
      }, 30_000);

      it('the pod CIDR is read from the inline masquerade mark of the services chain', () => {
        expect(facts.mode).toBe('nftables');
        expect(facts.podSelectors[4]).toEqual({ cidrs: [L.podCidr], interfaces: [] });
      });

      it('pod masquerade stays right when the hairpin-connections set decides it: ETP=Cluster masqueraded, ETP=Local not', async () => {
        expect(
          snap.tables[0]!.sets.find((s) => s.name === 'hairpin-connections')!.elements.map((e) => e.key.join(' . ')),
        ).toEqual([`${L.localEp} . ${L.localEp} . tcp . ${L.epPort}`]);
        expect(await lab.connect(lab.pod, lbIp(10), 80)).toBe(`remote-ep ${L.node}`);
        expect(fact(facts, 10)).toMatchObject({ trafficPolicy: 'Cluster', podTraffic: 'masquerade', capture: 'dnat' });
        expect(await lab.connect(lab.pod, lbIp(11), 80)).toBe(`local-ep ${L.pod}`);
        expect(fact(facts, 11)).toMatchObject({ trafficPolicy: 'Local', podTraffic: 'exempt', capture: 'dnat' });
      });

      it('source ranges and ETP=Local drops read as in iptables mode', async () => {
        expect(await lab.connect(lab.pod, lbIp(15), 80)).toBe('timeout');
        expect(fact(facts, 15)).toMatchObject({ capture: 'dropped', sourceRangeDrop: { certain: true } });
        expect(fact(facts, 15).sourceRangeDrop!.evidence).toEqual([
          expect.stringMatching(
            /: map firewall-ips: 203\.0\.113\.15 \. tcp \. 80 comment "shop\/ranged:http" : goto firewall-/,
          ),
          expect.stringMatching(/: chain firewall-\S+: ip saddr != 198\.51\.100\.0\/24 drop$/),
        ]);
        expect(fact(facts, 12)).toMatchObject({
          podTraffic: 'exempt',
          capture: 'dnat',
          noEndpoints: { verdict: 'drop', preDnatChecks: [] },
        });
      });

      it('the snapshot labels an IP that only service-ips holds "LB/external IP", and its JSON keeps the affinity timeout', () => {
        const lines = formatNatSummary(
          { backend: 'nft', backendChoice: { backend: 'nft', reason: 'x', legacy: none, nft: none }, warnings: [] },
          snap,
        );
        expect(lines).toContainEqual(
          expect.stringMatching(
            /^ {2}LB\/external IP 203\.0\.113\.10:80\/tcp shop\/web:http: ETP=Cluster, pod traffic masqueraded, dnat$/,
          ),
        );
        // firewall-ips holds LB IPs only.
        expect(lines).toContainEqual(
          expect.stringMatching(
            /^ {2}LB 203\.0\.113\.15:80\/tcp shop\/ranged:http: ETP=Cluster, pod traffic dropped by loadBalancerSourceRanges$/,
          ),
        );
        const json = JSON.parse(JSON.stringify(snap)) as NftSnapshot;
        const affinity = json.tables[0]!.sets.filter((s) => s.name.startsWith('affinity-'));
        expect(affinity.length).toBe(1);
        expect(affinity[0]!.timeout).toBe(10800);
      });
    });
  },
);

const none = { ruleLines: 0, kubeRuleLines: 0, kubeletChains: false };
