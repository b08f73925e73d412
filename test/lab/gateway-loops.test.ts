// The L7 loop through a Gateway API Gateway, on real kube-proxy rules (the loop lab of
// test/support/kube-lab.ts: node1 runs kube-proxy v1.20.2 in iptables mode against the real API
// server, into which test/fixtures/gateway-api/crds.yaml installs the Gateway API kinds).
// - Loop: the LB of Gateway lab/gw (GatewayClass of the AWS Load Balancer Controller, its address
//   in status.addresses) keeps the client address (IP_TRANSPARENT) and proxies to node1's
//   NodePort for the accepted HTTPRoute lab/web. kube-proxy has no rule for a Gateway address, so
//   the pod's connection goes to the LB, which re-opens it from the pod's address to node1; node1
//   DNATs it to the local server pod, whose reply goes straight to the client. The compiled
//   `clbprobe diagnose` in node1, with `kubectl get -o json` of the Services and Gateway kinds,
//   reports L7-loop active naming the Gateway, its route and the provider's options, with both
//   conntrack legs and the drawn path; `collect` in node1 then `diagnose --from` its bundle gives
//   the same verdict.
// - Control: the same LB connecting from its own address works, and nothing is active (the
//   Gateway is known: a risk, since the LB's settings are not visible from the node).
// Namespaces are cbg-*; kube-proxy, the LB process, the namespaces, the objects and the files are
// removed also on failure.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB } from '../../src/demo/lab.js';
import type { Finding } from '../../src/detect/types.js';
import { gateway, gatewayClass, route } from '../support/gateway-objects.js';
import { type ControlPlane, startControlPlane } from '../support/kube-control-plane.js';
import { createKubeLab, type IngressLb, type KubeLab, startL7Lb } from '../support/kube-lab.js';
import { createObject, installCrds } from '../support/kube-objects.js';
import { kubeCacheReady } from '../support/kube-proxy.js';
import { isRoot } from '../support/netns.js';
import { requireBuiltCli, runCli } from '../support/run-cli.js';
import { sleep } from '../support/wait.js';

const PREFIX = 'cbg-';
const GW_VIP = '10.0.100.210';
const CRDS = join(import.meta.dirname, '../fixtures/gateway-api/crds.yaml');
const GATEWAY_KINDS = ['gatewayclasses', 'gateways', 'httproutes'];
const G = '/apis/gateway.networking.k8s.io/v1';

const active = (fs: Finding[]): string[] =>
  fs.filter((f) => f.severity === 'active').map((f) => `${f.mechanism}: ${f.summary}`);
const l7 = (fs: Finding[]): Finding[] => fs.filter((f) => f.mechanism === 'L7-loop' && f.service.name === 'web');
const listed = (fs: Finding[]) => JSON.stringify(fs.map((f) => `${f.mechanism} ${f.severity}: ${f.summary}`));

describe.skipIf(!isRoot || !kubeCacheReady())('the L7 loop through a Gateway on real kube-proxy v1.20.2 rules', () => {
  let cp: ControlPlane | undefined;
  let k: KubeLab | undefined;
  let dir: string;
  let lb: IngressLb | undefined;

  beforeAll(async () => {
    requireBuiltCli();
    dir = mkdtempSync(join(tmpdir(), 'cbg-'));
    cp = await startControlPlane();
    await installCrds(cp, CRDS);
    k = await createKubeLab(PREFIX, 'Local');
    await createObject(cp, gatewayClass('aws-alb', 'gateway.k8s.aws/alb'));
    await createObject(
      cp,
      gateway({
        namespace: 'lab',
        name: 'gw',
        className: 'aws-alb',
        listeners: [{ name: 'http', port: 80, protocol: 'HTTP' }],
        addresses: [{ type: 'IPAddress', value: GW_VIP }],
      }),
    );
    await createObject(
      cp,
      route({
        namespace: 'lab',
        name: 'web',
        parents: [{ name: 'gw', sectionName: 'http' }],
        backends: [{ name: 'web', port: LAB.port }],
        accepted: [true],
      }),
    );
  }, 180_000);

  afterAll(async () => {
    lb?.stop();
    for (const path of [
      `${G}/namespaces/lab/httproutes/web`,
      `${G}/namespaces/lab/gateways/gw`,
      `${G}/gatewayclasses/aws-alb`,
    ])
      await cp?.request('DELETE', path).catch(() => undefined);
    await k?.destroy();
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('loop: the Gateway LB keeping the client address proxies back to node1; L7-loop active, naming the Gateway, live and from a bundle', async () => {
    // The LB retries its backend connect for 15 s, so the loop's conntrack entries stay while diagnose and collect run.
    lb = await startL7Lb(k!, GW_VIP, true, 15);
    expect(k!.kubeProxy.save()).not.toContain(GW_VIP);
    const clusterFile = k!.writeClusterFile(join(dir, 'gateway.json'), GATEWAY_KINDS);
    const connect = k!.connect(GW_VIP, 80, 30_000);
    await sleep(2000);
    const html = join(dir, 'report.html');
    const d = k!.diagnose(clusterFile, ['--html', html]);
    const bundle = join(dir, 'bundle');
    const collected = runCli(
      k!.lab.node.name,
      ['collect', '--out', bundle, '--cluster-file', clusterFile, '--node-name', LAB.node1Name],
      90_000,
    );
    expect(await connect).toBe('connected');
    expect(d.status, d.stderr).toBe(1);
    const [loop, ...more] = l7(d.findings).filter((f) => f.severity === 'active');
    expect(more).toEqual([]);
    expect(loop, listed(d.findings)).toBeDefined();
    expect(loop!.summary).toContain(
      `from ${LAB.clientPod} to Gateway lab/gw VIP ${GW_VIP}:80 were proxied back to this node's NodePort ${LAB.node1}:${LAB.nodePort}`,
    );
    const evidence = loop!.evidence.join('\n');
    expect(evidence).toMatch(new RegExp(`src=${LAB.clientPod} dst=${GW_VIP} sport=\\d+ dport=80`));
    expect(evidence).toMatch(new RegExp(`src=${LAB.clientPod} dst=${LAB.node1} sport=\\d+ dport=${LAB.nodePort}`));
    expect(evidence).toContain(
      'Gateway lab/gw (class aws-alb, controller gateway.k8s.aws/alb) listeners 80/TCP: HTTPRoute lab/web → lab/web:80',
    );
    expect(loop!.remedy).toContain('Gateway lab/gw: make its LB stop bringing the client address to this node');
    expect(loop!.remedy).toContain('TargetGroupConfiguration with targetType: ip');
    expect(readFileSync(html, 'utf8')).toContain('Gateway VIP');

    // The bundle written during the loop gives the same verdict offline.
    expect(collected.status, collected.stderr).toBe(0);
    const offline = runCli(undefined, ['diagnose', '--json', '--from', bundle], 90_000);
    const fromBundle = (JSON.parse(offline.stdout) as { findings: Finding[] }).findings;
    expect(offline.status, offline.stderr).toBe(1);
    expect(
      l7(fromBundle)
        .filter((f) => f.severity === 'active')
        .map((f) => f.summary.replace(/^\d+ request/, 'N request')),
      listed(fromBundle),
    ).toEqual([loop!.summary.replace(/^\d+ request/, 'N request')]);
  }, 150_000);

  it('control: the same Gateway LB connecting from its own address works, and nothing is active', async () => {
    lb?.stop();
    k!.lab.node.run('conntrack', '-F');
    lb = await startL7Lb(k!, GW_VIP, false);
    expect(await k!.connect(GW_VIP, 80, 10_000)).toBe('connected server-pod');
    const d = k!.diagnose(k!.writeClusterFile(join(dir, 'gateway-snat.json'), GATEWAY_KINDS));
    expect(active(d.findings)).toEqual([]);
    expect(d.status, d.stderr).toBe(0);
    // The Gateway is known to the diagnosis (not a vacuous pass): a risk, since the LB's settings are not visible from the node.
    const risks = l7(d.findings);
    expect(risks.map((f) => f.severity)).toEqual(['risk']);
    expect(risks[0]!.summary).toContain(`Gateway lab/gw (VIP ${GW_VIP}) proxies to NodePort ${LAB.nodePort}`);
    lb.stop();
    lb = undefined;
  }, 120_000);
});
