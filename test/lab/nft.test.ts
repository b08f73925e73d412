// kube-proxy's nftables mode against the real kernel: kube-proxy's ruleset (in
// its exact format, test/support/kube-nft.ts) is loaded by Debian's nft into a
// namespace node, connections from a pod and from the node itself show what the
// datapath really does, and the reader, the interpretation, `clbprobe collect`
// and `clbprobe diagnose --from` must say the same. Both filter-chain layouts:
// v1.31 (priority -110, kubernetes#131765) and v1.34 (#132456).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Finding } from '../../src/detect/types.js';
import { type KubeNatFacts, kubeNatFacts, type LoadBalancerFact } from '../../src/kubeproxy/facts.js';
import { readNatFacts } from '../../src/kubeproxy/read-facts.js';
import { nft } from '../../src/source/nft.js';
import { isRoot } from '../support/netns.js';
import { createNftLab, NFT_LAB as L, type NftLab } from '../support/nft-lab.js';
import { LAB_SERVICES, labClusterList, NODE_NAME } from '../support/nft-services.js';
import { requireBuiltCli, runCli } from '../support/run-cli.js';

const hasNft = spawnSync('nft', ['--version']).status === 0;
const lbIp = (n: number): string => `203.0.113.${n}`;

if (!isRoot || !hasNft)
  console.warn('test/lab/nft.test.ts: skipped, needs root and nft (scripts/setup.sh installs nftables)');

describe.skipIf(!isRoot || !hasNft)(
  'kube-proxy nftables mode on a real kernel (nft, namespaces, traffic; needs root)',
  () => {
    let lab: NftLab;
    let dir: string;
    beforeAll(async () => {
      lab = await createNftLab('cbn-');
      dir = mkdtempSync(join(tmpdir(), 'cbn-nft-'));
      writeFileSync(join(dir, 'cluster.json'), JSON.stringify(labClusterList()));
    }, 60_000);
    afterAll(() => {
      lab?.destroy();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('the nft source is absent on a node without kube-proxy tables, and unchanged when the tables are', async () => {
      lab.node.sh('nft delete table ip kube-proxy 2>/dev/null || true');
      const reader = nft.live!({ netns: `/var/run/netns/${lab.node.name}` });
      expect(await reader.read()).toMatchObject({
        state: 'absent',
        reason: expect.stringMatching(/not in nftables mode/),
      });
      lab.load('v1.34', LAB_SERVICES);
      expect(await reader.read()).toMatchObject({ state: 'up' });
      expect(await reader.read()).toEqual({ state: 'unchanged' });
    });

    const fact = (f: KubeNatFacts, n: number): LoadBalancerFact | undefined =>
      f.loadBalancers.find((l) => l.vip === lbIp(n) && l.port === 80);

    for (const layout of ['v1.34', 'v1.31'] as const) {
      describe(`${layout} layout`, () => {
        let facts: KubeNatFacts;
        beforeAll(async () => {
          lab.load(layout, LAB_SERVICES);
          // The live reader of the source, as the agent and `snapshot` run it.
          const r = await nft.live!({ netns: `/var/run/netns/${lab.node.name}` }).read();
          if (r.state !== 'up') throw new Error(`nft source ${r.state}: ${'reason' in r ? r.reason : ''}`);
          expect(r.value.tables.map((t) => `${t.family} ${t.name}`)).toEqual(['ip kube-proxy']);
          expect(r.value.absent).toEqual(['ip6']);
          expect(r.note).toBe('no table ip6 kube-proxy (single-stack)');
          const n = await readNatFacts({ netns: lab.node.name });
          facts = kubeNatFacts(n.nat, r.value);
        }, 30_000);

        it('reads the mode and the filter-chain layout', () => {
          expect(facts.mode).toBe('nftables');
          expect(facts.nftLayouts).toEqual({ 4: layout });
          expect(facts.podSelectors[4]).toEqual({ cidrs: [L.podCidr], interfaces: [] });
        });

        it('ETP=Cluster: pod -> LB IP is DNATed on the node and masqueraded (the endpoint sees the node IP)', async () => {
          expect(await lab.connect(lab.pod, lbIp(10), 80)).toBe(`remote-ep ${L.node}`);
          expect(fact(facts, 10)).toMatchObject({
            trafficPolicy: 'Cluster',
            podTraffic: 'masquerade',
            capture: 'dnat',
            service: 'shop/web:http',
          });
          expect(fact(facts, 10)!.evidence[0]).toMatch(
            /: map service-ips: 203\.0\.113\.10 \. tcp \. 80 : goto external-[A-Z2-7]{8}-shop\/web\/tcp\/http$/,
          );
          expect(fact(facts, 10)!.evidence).toContainEqual(
            expect.stringMatching(/chain external-\S+: jump mark-for-masquerade$/),
          );
        });

        it('ETP=Local with a local endpoint: pod traffic is short-circuited, its source kept', async () => {
          expect(await lab.connect(lab.pod, lbIp(11), 80)).toBe(`local-ep ${L.pod}`);
          expect(fact(facts, 11)).toMatchObject({ trafficPolicy: 'Local', podTraffic: 'exempt', capture: 'dnat' });
          expect(fact(facts, 11)!.noEndpoints).toBeUndefined();
          expect(fact(facts, 11)!.evidence).toContainEqual(
            expect.stringMatching(/ip saddr 10\.244\.0\.0\/16 goto service-\S+ comment "short-circuit pod traffic"$/),
          );
        });

        it('ETP=Local without local endpoints: pods reach the remote endpoint; host-network clients only with the v1.34 layout', async () => {
          expect(await lab.connect(lab.pod, lbIp(12), 80)).toBe(`remote-ep ${L.pod}`);
          const host = await lab.connect(lab.node, lbIp(12), 80);
          const f = fact(facts, 12)!;
          expect(f).toMatchObject({
            trafficPolicy: 'Local',
            podTraffic: 'exempt',
            capture: 'dnat',
            noEndpoints: { verdict: 'drop' },
          });
          if (layout === 'v1.31') {
            expect(host).toBe('timeout');
            expect(f.noEndpoints!.preDnatChecks).toEqual(['filter-output (hook output, priority -110)']);
          } else {
            expect(host).toBe(`remote-ep ${L.node}`);
            expect(f.noEndpoints!.preDnatChecks).toEqual([]);
          }
        });

        it('no endpoints at all: refused on the node (no-endpoint-services -> reject-chain)', async () => {
          expect(await lab.connect(lab.pod, lbIp(13), 80)).toBe('ECONNREFUSED');
          expect(fact(facts, 13)).toMatchObject({ capture: 'dropped', noEndpoints: { verdict: 'reject' } });
        });

        it('ipMode Proxy: not in kube-proxy maps, so pod traffic leaves the node and reaches the LB with the pod source', async () => {
          expect(await lab.connect(lab.pod, lbIp(14), 80)).toBe(`lb ${L.pod}`);
          expect(fact(facts, 14)).toBeUndefined();
        });

        it('loadBalancerSourceRanges without the pod CIDR: pod traffic is dropped before DNAT (firewall-ips)', async () => {
          expect(await lab.connect(lab.pod, lbIp(15), 80)).toBe('timeout');
          expect(fact(facts, 15)).toMatchObject({ capture: 'dropped' });
          expect(fact(facts, 15)!.evidence).toContainEqual(
            expect.stringMatching(/chain firewall-\S+: ip saddr != 198\.51\.100\.0\/24 drop$/),
          );
        });

        it('`clbprobe collect` carries nft -j list ruleset and `diagnose --from` gives the verdicts above, quoting nft objects', () => {
          requireBuiltCli();
          const out = join(dir, `bundle-${layout}`);
          const c = runCli(
            undefined,
            [
              'collect',
              '--netns',
              lab.node.name,
              '--out',
              out,
              '--cluster-file',
              join(dir, 'cluster.json'),
              '--node-name',
              NODE_NAME,
            ],
            60_000,
          );
          expect(c.status, c.stderr).toBe(0);
          const manifest = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8')) as {
            files: { file?: string; command: string }[];
          };
          expect(manifest.files).toContainEqual(
            expect.objectContaining({
              file: 'nft-ruleset.json',
              command: expect.stringMatching(/nft -j list ruleset$/),
            }),
          );
          const d = runCli(undefined, ['diagnose', '--from', out, '--json'], 60_000);
          const res = JSON.parse(d.stdout) as { findings: Finding[] };
          const of = (svc: string, mech: string): Finding[] =>
            res.findings.filter((f) => f.service.name === svc && f.mechanism === mech);
          const mode = of('web', 'proxy-mode')[0]!;
          expect(mode.summary).toMatch(/^203\.0\.113\.10:80: kube-proxy nftables mode: .* service-ips/);
          expect(mode.evidence).toContainEqual(
            expect.stringMatching(/nft-ruleset\.json: map service-ips: 203\.0\.113\.10 \. tcp \. 80 : goto external-/),
          );
          expect(of('proxy', 'proxy-mode')[0]!.summary).toMatch(
            /no kube-proxy map holds this LB IP:port .* leaves the node/,
          );
          const far = of('far', 'local-no-ep');
          expect(far).toHaveLength(1);
          if (layout === 'v1.31') {
            expect(far[0]).toMatchObject({ severity: 'risk' });
            expect(far[0]!.summary).toMatch(
              /kubernetes#131765.*filter-output \(hook output, priority -110\).*host-network pods and processes on this node get their connections dropped/,
            );
            expect(far[0]!.remedy).toMatch(/#132456/);
          } else {
            expect(far[0]).toMatchObject({ severity: 'info' });
            expect(far[0]!.summary).toMatch(/short-circuit pod traffic/);
          }
          expect(far[0]!.evidence[0]).toMatch(
            /map no-endpoint-services: 203\.0\.113\.12 \. tcp \. 80 comment "shop\/far:http" : drop$/,
          );
          // Short-circuited (ETP=Local) and masqueraded (ETP=Cluster) Services do not leave the node: no loop or no-SNAT risk.
          for (const svc of ['web', 'api', 'far']) {
            expect(
              res.findings.filter((f) => f.service.name === svc && ['L4-loop', 'no-SNAT'].includes(f.mechanism)),
            ).toEqual([]);
          }
        }, 90_000);
      });
    }
  },
);
