// End to end on a real cluster's pieces: the real kube-apiserver v1.20.2 and the real kube-proxy
// v1.20.2 in iptables mode writing node1's rules (test/support/kube-lab.ts), the compiled
// `clbprobe agent` in node1's namespace watching that API server with deploy/rbac.yaml's identity
// (as shipped: the image's Node release with the DaemonSet's node flags, env and script, the bundle;
// its own flags for this lab, and /metrics without --metrics-auth: test/lab/agent-kube-apiserver
// runs the manifest's command whole)
// (through the socket relay kube-proxy uses), eBPF counters on node1's uplink, and Debian's
// prometheus scraping it from a scrape namespace joined to node1 by a veth. Two Services:
// - lab/web: a hostname-only LB (AWS NLB style, instance targets, client IP preserved): kube-proxy
//   has no rule for its address, the pod's connection leaves for the LB, which sends it back to
//   node1's NodePort: the loop. A DNS server in the LB namespace answers the name.
// - lab/web-safe: a VIP-mode LB IP, ETP=Local: kube-proxy short-circuits pod traffic to it on the
//   node (KUBE-XLB "Redirect pods ..."), so nothing loops.
// Client connections are driven, then Prometheus' HTTP API must show the loop for lab/web only,
// and `clbprobe evidence` the loop pair. Namespaces are cba-*; everything is removed on failure too.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB } from '../../src/demo/lab.js';
import { Netns, vethPair } from '../../src/demo/netns.js';
import { type DnsServer, startDns } from '../support/dns-lab.js';
import { imageNode } from '../support/image-node.js';
import { type ControlPlane, startControlPlane } from '../support/kube-control-plane.js';
import { createKubeLab, type KubeLab } from '../support/kube-lab.js';
import { createList } from '../support/kube-objects.js';
import { kubeCacheReady } from '../support/kube-proxy.js';
import { isRoot } from '../support/netns.js';
import { CLI, requireBuiltCli } from '../support/run-cli.js';
import { shippedAgent } from '../support/shipped-agent.js';
import { until } from '../support/wait.js';

const PROMETHEUS = '/usr/bin/prometheus';
const PREFIX = 'cba-';
const DEPLOY = join(import.meta.dirname, '../../deploy');
const NAME = 'k8s-lab-web-0a1b2c3d4e-0123456789abcdef.elb.eu-west-1.amazonaws.com';
const SAFE_VIP = '10.0.100.101';
const SAFE_NODE_PORT = 30081;
const SCRAPE_IP = '192.168.77.2';

const ready = kubeCacheReady();
if (isRoot && !ready) {
  console.warn(
    '\n*** test/e2e/prometheus.test.ts SKIPPED: /var/cache/clbprobe-kube lacks the Kubernetes binaries. ' +
      'Run `sudo scripts/setup-kube.sh` (CI does) to build kube-apiserver and kube-proxy v1.20.2. ***\n',
  );
}

function inNs(ns: Netns, cmd: string, args: string[], timeout = 10_000): string {
  const r = spawnSync('ip', ['netns', 'exec', ns.name, cmd, ...args], { encoding: 'utf8', timeout });
  return r.stdout ?? '';
}

/** lab/web-safe: the same server pod behind a VIP-mode LB IP, ETP=Local. */
const safeService = {
  items: [
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: {
        name: 'web-safe',
        namespace: 'lab',
        annotations: { 'service.kubernetes.io/qcloud-loadbalancer-internal-subnetid': 'subnet-lab00001' },
      },
      spec: {
        type: 'LoadBalancer',
        clusterIP: '10.96.0.81',
        externalTrafficPolicy: 'Local',
        healthCheckNodePort: 32002,
        ports: [
          { name: 'http', port: LAB.port, protocol: 'TCP', targetPort: LAB.serverPort, nodePort: SAFE_NODE_PORT },
        ],
        selector: { app: 'web' },
      },
      status: { loadBalancer: { ingress: [{ ip: SAFE_VIP }] } },
    },
    {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'web-safe-abcde', namespace: 'lab', labels: { 'kubernetes.io/service-name': 'web-safe' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: [LAB.serverPod], conditions: { ready: true }, nodeName: LAB.node1Name }],
      ports: [{ name: 'http', port: LAB.serverPort, protocol: 'TCP' }],
    },
  ],
};

/** Sum of loop_return packets for a Service in the agent's /metrics (read inside its namespace). */
function loopReturnFromMetrics(k: KubeLab, service: string): number {
  const text = inNs(k.lab.node, 'curl', ['-sf', 'http://127.0.0.1:9811/metrics']);
  const re = new RegExp(
    `^clbprobe_lb_path_packets_total\\{[^}]*service="${service}"[^}]*kind="loop_return"[^}]*\\} (\\d+)`,
    'gm',
  );
  return [...text.matchAll(re)].reduce((s, m) => s + Number(m[1]), 0);
}

type PromResult = { metric: Record<string, string>; value: [number, string] }[];

describe.skipIf(!isRoot || !existsSync(PROMETHEUS) || !ready)(
  'agent metrics through a real Prometheus, on real kube-proxy rules and a real API server',
  () => {
    let dir: string;
    let cp: ControlPlane | undefined;
    let k: KubeLab | undefined;
    let dns: DnsServer | undefined;
    let scrape: Netns | undefined;
    let prometheus: ChildProcess | undefined;
    let agent: ChildProcess | undefined;
    let stderr = '';
    let socket: string;

    const query = (q: string): PromResult => {
      const out = inNs(scrape!, 'curl', [
        '-sfG',
        'http://127.0.0.1:9090/api/v1/query',
        '--data-urlencode',
        `query=${q}`,
      ]);
      if (!out) return [];
      return (JSON.parse(out) as { data: { result: PromResult } }).data.result;
    };
    const byService = (r: PromResult) => Object.fromEntries(r.map((x) => [x.metric.service, Number(x.value[1])]));

    const cleanup = async (): Promise<void> => {
      prometheus?.kill('SIGKILL');
      agent?.kill('SIGKILL');
      dns?.stop();
      scrape?.delete();
      if (k) {
        await k.cp.request('DELETE', '/api/v1/namespaces/lab/services/web-safe').catch(() => undefined);
        await k.destroy();
      }
      await cp?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    };

    beforeAll(async () => {
      requireBuiltCli();
      dir = mkdtempSync(join(tmpdir(), 'cba-e2e-'));
      socket = join(dir, 'evidence.sock');
      try {
        const t0 = Date.now();
        cp = await startControlPlane();
        k = await createKubeLab(PREFIX, 'Local');
        const { lab } = k;
        // lab/web becomes hostname-only (the NLB's name), its address served by the LB namespace's DNS.
        dns = await startDns(lab.lb, '10.0.1.1', { [NAME]: { A: [[LAB.vip, 30]] } });
        dns.serve(lab.node, '10.0.1.1');
        await k.patchService(
          { metadata: { annotations: { 'service.beta.kubernetes.io/aws-load-balancer-nlb-target-type': 'instance' } } },
          'annotation',
          () => true,
        );
        await k.setLbIngress(
          [{ hostname: NAME }],
          'lab/web without LB-IP rules',
          (s) => !s.includes('"lab/web:http loadbalancer IP"'),
        );
        await createList(cp, safeService);
        await k.kubeProxy.waitForRules('lab/web-safe rules', (s) => s.includes('"lab/web-safe:http loadbalancer IP"'));
        // The agent's identity as shipped.
        cp.kubectl(['apply', '-f', join(DEPLOY, 'namespace.yaml')]);
        cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'rbac.yaml')]);
        // The kubeconfig names 127.0.0.1:6443: node1's loopback, where kube-proxy's relay to the API server listens.
        const kubeconfig = cp.kubeconfig('clbprobe', 'https://127.0.0.1:6443');
        scrape = Netns.create(PREFIX);
        vethPair(scrape, 's0', lab.node, 'scrape0');
        scrape.run('ip', 'addr', 'add', '192.168.77.1/30', 'dev', 's0');
        lab.node.run('ip', 'addr', 'add', `${SCRAPE_IP}/30`, 'dev', 'scrape0');
        const shipped = shippedAgent(
          [
            '--kubeconfig',
            kubeconfig,
            '--node-name',
            LAB.node1Name,
            '--listen',
            ':9811',
            '--interface',
            'eth0',
            '--capture',
            'ebpf',
            '--evidence-socket',
            socket,
            '--log-level',
            'info',
          ],
          LAB.node1Name,
        );
        agent = spawn('ip', ['netns', 'exec', lab.node.name, shipped.node, ...shipped.argv], {
          env: shipped.env,
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        agent.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
        writeFileSync(
          join(dir, 'prometheus.yml'),
          `global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: clbprobe\n    static_configs:\n      - targets: ['${SCRAPE_IP}:9811']\n`,
        );
        prometheus = spawn(
          'ip',
          [
            'netns',
            'exec',
            scrape.name,
            PROMETHEUS,
            `--config.file=${join(dir, 'prometheus.yml')}`,
            `--storage.tsdb.path=${join(dir, 'tsdb')}`,
            '--web.listen-address=127.0.0.1:9090',
            '--log.level=warn',
          ],
          { stdio: 'ignore' },
        );
        await until(`agent ready (stderr: ${stderr})`, 30_000, () =>
          inNs(lab.node, 'curl', ['-sf', 'http://127.0.0.1:9811/readyz']).startsWith('ready') ? true : undefined,
        );
        // `ip netns exec` execs the command: the agent's process is the image's node.
        expect(readlinkSync(`/proc/${agent.pid}/exe`)).toBe(imageNode());
        console.log(`control plane, kube-proxy, agent and Prometheus up: ${Date.now() - t0} ms`);
      } catch (e) {
        await cleanup();
        throw e;
      }
    }, 180_000);

    afterAll(cleanup);

    it('loop_return counts for the looping Service only, its L4-loop finding is 1, and evidence shows the pair', async () => {
      const lab = k!.lab;
      expect(loopReturnFromMetrics(k!, 'web'), stderr).toBe(0);
      const t0 = performance.now();
      const loopConnect = k!.connect(LAB.vip, LAB.port, 1500);
      await until('loop_return in the agent /metrics', 5000, () =>
        loopReturnFromMetrics(k!, 'web') > 0 ? true : undefined,
      );
      const toMetricsMs = performance.now() - t0;
      const [looped, safeConnect] = await Promise.all([loopConnect, k!.connect(SAFE_VIP, LAB.port, 3000)]);
      expect(looped).toBe('timeout');
      // Short-circuited by kube-proxy on the node: the server pod answers, the LB never sees it.
      expect(safeConnect).toBe('connected server-pod');

      const counts = await until('Prometheus to scrape the loop', 15_000, () => {
        const r = byService(query('sum by (service) (clbprobe_lb_path_packets_total{kind="loop_return"})'));
        return r.web! > 0 && r['web-safe'] !== undefined ? r : undefined;
      });
      expect(counts['web-safe']).toBe(0);
      // The looping Service's pod→LB traffic was counted on the uplink; the safe one's never left the node.
      const toLb = byService(query('sum by (service) (clbprobe_lb_path_packets_total{kind="to_lb"})'));
      expect(toLb.web).toBeGreaterThan(0);
      expect(toLb['web-safe']).toBe(0);

      const findings = await until('the L4-loop finding in Prometheus', 10_000, () => {
        const r = query('clbprobe_findings_active{mechanism="L4-loop",severity="active"}');
        return r.length ? r : undefined;
      });
      expect(findings.map((f) => [f.metric.service, f.value[1]])).toEqual([['web', '1']]);
      expect(query('clbprobe_findings_active{service="web-safe",severity="active"}')).toEqual([]);
      // The agent reads conntrack, NAT, the capture counters, the API server and the LB name. This
      // kernel has no IPVS: not a failure, so there is no ipvs series at all.
      for (const source of ['conntrack', 'capture', 'nat', 'addresses', 'cluster', 'dns']) {
        expect(
          query(`clbprobe_source_up{source="${source}"}`).map((r) => r.value[1]),
          source,
        ).toEqual(['1']);
      }
      expect(query('clbprobe_source_up{source="ipvs"}')).toEqual([]);
      expect(query('clbprobe_errors_total{source="ipvs"}')).toEqual([]);

      const ev = inNs(lab.node, process.execPath, [
        CLI,
        'evidence',
        '--service',
        'lab/web',
        '--json',
        '--socket',
        socket,
      ]);
      const lines = ev
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { type: string; class?: string; line?: string });
      const pair = lines.filter((l) => l.class === 'loopback_pair').map((l) => l.line!);
      expect(pair.some((l) => l.includes(`src=${LAB.clientPod} dst=${LAB.vip}`) && l.includes('[UNREPLIED]'))).toBe(
        true,
      );
      expect(
        pair.some((l) => l.includes(`src=${LAB.clientPod} dst=${LAB.node1}`) && l.includes(`dport=${LAB.nodePort}`)),
      ).toBe(true);
      console.log(`looping connect -> loop_return in /metrics: ${toMetricsMs.toFixed(0)} ms`);
    }, 60_000);

    it('SIGTERM: the agent detaches and exits within 5 s', async () => {
      const t0 = performance.now();
      const exited = new Promise<number | null>((r) => agent!.once('exit', (code) => r(code)));
      agent!.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(performance.now() - t0).toBeLessThan(5000);
      // No clbprobe program left on the uplink.
      expect(inNs(k!.lab.node, 'tc', ['filter', 'show', 'dev', 'eth0', 'ingress'])).not.toMatch(/clbp/);
    });
  },
);
