// Loops on real kube-proxy rules (issue 18 item 4): the loop lab's node1 runs the real kube-proxy
// v1.20.2 in iptables mode against the real API server (test/support/kube-lab.ts), and every
// verdict is the compiled `clbprobe diagnose` in node1 with `kubectl get -o json` from that server.
// - VIP-mode LB IP (status.loadBalancer.ingress[].ip), ETP=Local then Cluster: kube-proxy
//   short-circuits pod -> LB IP on the node (KUBE-FW -> KUBE-XLB "Redirect pods trying to reach
//   external loadbalancer VIP to clusterIP"), the pod reaches the server pod without the LB, and
//   clbprobe says no loop and why.
// - The L7 loop: an Ingress LB that keeps the client address (IP_TRANSPARENT) and proxies to
//   node1's NodePort. kube-proxy has no rule for an Ingress address, so the pod's connection goes
//   to the LB, which re-opens it from the pod's address to node1's NodePort; node1 DNATs it to the
//   local server pod, whose reply goes straight to the client: the backend connection never
//   completes. clbprobe reports L7-loop active with the two conntrack legs. Control: the same LB
//   without client-address preservation works and nothing is active.
// - A hostname-only LB (status.loadBalancer.ingress[].hostname only, AWS NLB style): kube-proxy
//   removes its LB-IP rules, the pod's connection leaves for the LB, which DNATs it back to node1's
//   NodePort keeping the client address: a real L4 loop that clbprobe reports with the hostname.
// Namespaces are cbkp-*; kube-proxy, the LB processes and the namespaces are removed also on failure.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB } from '../../src/demo/lab.js';
import type { Finding } from '../../src/detect/types.js';
import { type DnsServer, startDns } from '../support/dns-lab.js';
import { type ControlPlane, startControlPlane } from '../support/kube-control-plane.js';
import { createKubeLab, type IngressLb, type KubeLab, startIngressLb } from '../support/kube-lab.js';
import { kubeCacheReady } from '../support/kube-proxy.js';
import { isRoot } from '../support/netns.js';
import { requireBuiltCli } from '../support/run-cli.js';
import { sleep } from '../support/wait.js';

const PREFIX = 'cbkp-';
const INGRESS_VIP = '10.0.100.200';
const NAME = 'k8s-lab-web-0a1b2c3d4e-0123456789abcdef.elb.eu-west-1.amazonaws.com';

const ready = kubeCacheReady();
if (isRoot && !ready) {
  console.warn(
    '\n*** test/lab/kube-proxy-loops.test.ts SKIPPED: /var/cache/clbprobe-kube lacks the Kubernetes binaries. ' +
      'Run `sudo scripts/setup-kube.sh` (CI does) to build kube-apiserver and kube-proxy v1.20.2. ***\n',
  );
}

const active = (fs: Finding[]): string[] =>
  fs.filter((f) => f.severity === 'active').map((f) => `${f.mechanism}: ${f.summary}`);
const of = (fs: Finding[], mechanism: string): Finding[] =>
  fs.filter((f) => f.mechanism === mechanism && f.service.name === 'web');

describe.skipIf(!isRoot || !ready)('loops on real kube-proxy v1.20.2 rules (iptables mode, real API server)', () => {
  let cp: ControlPlane | undefined;
  let k: KubeLab;
  let dir: string;
  let ingressLb: IngressLb | undefined;
  let dns: DnsServer | undefined;

  beforeAll(async () => {
    requireBuiltCli();
    dir = mkdtempSync(join(tmpdir(), 'cbkp-'));
    const t0 = Date.now();
    cp = await startControlPlane();
    k = await createKubeLab(PREFIX, 'Local');
    console.log(`control plane + lab + kube-proxy synced: ${Date.now() - t0} ms`);
  }, 180_000);

  afterAll(async () => {
    ingressLb?.stop();
    dns?.stop();
    await k?.destroy();
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('kube-proxy runs as configured: iptables mode, node1 found through the API, no machine-wide sysctl written', () => {
    const log = k.kubeProxy.log(100_000);
    expect(log).toContain('Using iptables Proxier.');
    expect(log).toContain(`Successfully retrieved node IP: ${LAB.node1}`);
    // Conntrack tuning off: no nf_conntrack_max, hashsize or netfilter timeout; the sysctls it did
    // change are the namespace's own (route_localnet).
    expect(log).not.toMatch(/Setting nf_conntrack_max|Set sysctl|hashsize/);
    const changed = [...log.matchAll(/Changed sysctl "([^"]+)"/g)].map((m) => m[1]);
    expect(changed).toEqual(['net/ipv4/conf/all/route_localnet']);
  });

  it('VIP-mode LB IP, ETP=Local: kube-proxy short-circuits the pod to the server pod on the node; clbprobe says no loop and why', async () => {
    const save = k.kubeProxy.save();
    expect(save).toMatch(
      /-A KUBE-XLB-\w+ -s 10\.244\.0\.0\/16 -m comment --comment "Redirect pods trying to reach external loadbalancer VIP to clusterIP" -j KUBE-SVC-/,
    );
    expect(await k.connect(LAB.vip, LAB.port, 2000)).toBe('connected server-pod');
    const d = k.diagnose(k.writeClusterFile(join(dir, 'vip-local.json')));
    expect(active(d.findings)).toEqual([]);
    expect(d.status, d.stderr).toBe(0);
    const [mode] = of(d.findings, 'proxy-mode');
    expect(mode?.summary).toContain('kube-proxy iptables mode: LB IPs are handled by NAT rules on the node');
    // The rule that short-circuits the pod is the evidence, read from the real kube-proxy's rules.
    const l4 = of(d.findings, 'L4-loop');
    expect(l4.every((f) => f.severity !== 'active')).toBe(true);
    expect(JSON.stringify(d.findings)).toContain(
      'Redirect pods trying to reach external loadbalancer VIP to clusterIP',
    );
  }, 120_000);

  it('VIP-mode LB IP, ETP=Cluster: masquerade + service chain on the node; no loop', async () => {
    await k.patchService(
      { spec: { externalTrafficPolicy: 'Cluster' } },
      'ETP=Cluster rules',
      (s) => !s.includes(':KUBE-XLB-') && /-A KUBE-FW-\w+ .*-j KUBE-MARK-MASQ/.test(s),
    );
    try {
      expect(await k.connect(LAB.vip, LAB.port, 2000)).toBe('connected server-pod');
      const d = k.diagnose(k.writeClusterFile(join(dir, 'vip-cluster.json')));
      expect(active(d.findings)).toEqual([]);
      expect(d.status, d.stderr).toBe(0);
      expect(of(d.findings, 'proxy-mode')[0]?.summary).toContain(
        'kube-proxy iptables mode: LB IPs are handled by NAT rules on the node',
      );
    } finally {
      await k.patchService({ spec: { externalTrafficPolicy: 'Local' } }, 'ETP=Local rules again', (s) =>
        s.includes(':KUBE-XLB-'),
      );
    }
  }, 120_000);

  it('L7 loop: an Ingress LB keeping the client address proxies back to node1; clbprobe reports L7-loop active with both legs', async () => {
    // The LB retries its backend connect for 15 s, so the loop's conntrack entries stay while diagnose runs.
    ingressLb = await startIngressLb(k, INGRESS_VIP, true, 15);
    // kube-proxy writes nothing for an Ingress address.
    expect(k.kubeProxy.save()).not.toContain(INGRESS_VIP);
    const clusterFile = k.writeClusterFile(join(dir, 'l7.json'));
    const connect = k.connect(INGRESS_VIP, 80, 30_000);
    await sleep(2000);
    const d = k.diagnose(clusterFile);
    // The LB accepted, its backend connection looped until it gave up and closed: nothing came back.
    expect(await connect).toBe('connected');
    expect(d.status, d.stderr).toBe(1);
    const [loop, ...more] = of(d.findings, 'L7-loop').filter((f) => f.severity === 'active');
    expect(more).toEqual([]);
    expect(loop, JSON.stringify(d.findings.map((f) => `${f.mechanism} ${f.severity}: ${f.summary}`))).toBeDefined();
    expect(loop!.summary).toContain(`from ${LAB.clientPod} to Ingress VIP ${INGRESS_VIP}:80`);
    expect(loop!.summary).toContain(`NodePort ${LAB.node1}:${LAB.nodePort}`);
    const legs = loop!.evidence.join('\n');
    expect(legs).toMatch(new RegExp(`src=${LAB.clientPod} dst=${INGRESS_VIP} sport=\\d+ dport=80`));
    expect(legs).toMatch(new RegExp(`src=${LAB.clientPod} dst=${LAB.node1} sport=\\d+ dport=${LAB.nodePort}`));
    expect(legs).toContain(`src=${LAB.serverPod} dst=${LAB.clientPod} sport=${LAB.serverPort}`);
  }, 120_000);

  it('L7 control: the same Ingress LB connecting from its own address works, and nothing is active', async () => {
    ingressLb?.stop();
    k.lab.node.run('conntrack', '-F');
    ingressLb = await startIngressLb(k, INGRESS_VIP, false);
    expect(await k.connect(INGRESS_VIP, 80, 10_000)).toBe('connected server-pod');
    const d = k.diagnose(k.writeClusterFile(join(dir, 'l7-snat.json')));
    expect(active(d.findings)).toEqual([]);
    expect(d.status, d.stderr).toBe(0);
    // The Ingress is known to the diagnosis (not a vacuous pass): a risk, since SNAT is not visible from the node.
    expect(of(d.findings, 'L7-loop').map((f) => f.severity)).toEqual(['risk']);
    ingressLb.stop();
    ingressLb = undefined;
  }, 120_000);

  it('hostname-only LB: kube-proxy drops the LB-IP rules, the NLB sends the pod back to node1 (L4 loop); clbprobe names the hostname', async () => {
    dns = await startDns(k.lab.lb, '10.0.1.1', { [NAME]: { A: [[LAB.vip, 30]] } });
    dns.serve(k.lab.node, '10.0.1.1');
    await k.patchService(
      { metadata: { annotations: { 'service.beta.kubernetes.io/aws-load-balancer-nlb-target-type': 'instance' } } },
      'annotation',
      () => true,
    );
    const save = await k.setLbIngress(
      [{ hostname: NAME }],
      'no LB-IP rule for the hostname-only LB',
      (s) => !s.includes('loadbalancer IP'),
    );
    // Still the NodePort and the local-endpoint chain (ETP=Local).
    expect(save).toMatch(
      /-A KUBE-NODEPORTS -p tcp -m comment --comment "lab\/web:http" -m tcp --dport 30080 -j KUBE-XLB-/,
    );
    k.lab.node.run('conntrack', '-F');
    // Diagnosed while the client still retries its SYN, so the loop's conntrack entries are fresh.
    const clusterFile = k.writeClusterFile(join(dir, 'hostname.json'));
    const connect = k.connect(LAB.vip, LAB.port, 10_000);
    await sleep(2000);
    const d = k.diagnose(clusterFile);
    expect(await connect).toBe('timeout');
    expect(d.status, d.stderr).toBe(1);
    const loop = of(d.findings, 'L4-loop').find((f) => f.severity === 'active');
    expect(loop, JSON.stringify(d.findings.map((f) => `${f.mechanism} ${f.severity}: ${f.summary}`))).toBeDefined();
    expect(loop!.summary).toContain(`${LAB.vip} (${NAME}):${LAB.port}`);
    expect(loop!.evidence.join('\n')).toContain(`src=${LAB.clientPod} dst=${LAB.node1} sport=`);
  }, 120_000);

  it('hostname-only control: the NLB without client IP preservation (SNAT) does not loop', async () => {
    k.lab.lb.sh('iptables -t nat -A POSTROUTING -o n1 -j MASQUERADE');
    k.lab.node.run('conntrack', '-F');
    await k.patchService(
      {
        metadata: {
          annotations: {
            'service.beta.kubernetes.io/aws-load-balancer-target-group-attributes': 'preserve_client_ip.enabled=false',
          },
        },
      },
      'annotation',
      () => true,
    );
    expect(await k.connect(LAB.vip, LAB.port, 2000)).toBe('connected server-pod');
    const d = k.diagnose(k.writeClusterFile(join(dir, 'hostname-snat.json')));
    expect(active(d.findings)).toEqual([]);
    expect(d.status, d.stderr).toBe(0);
    expect(of(d.findings, 'L4-loop')[0]?.summary).toContain('no loop');
  }, 120_000);
});
