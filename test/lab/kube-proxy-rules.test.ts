// Hand-written kube-proxy datapaths against the real thing (issue 18 item 5): the real kube-proxy
// v1.20.2 in iptables mode (test/support/kube-proxy.ts) in a node namespace, with the same
// Services, EndpointSlices and Node created through the real API server, and its nat table
// compared with the hand-written rules as a normalised diff (test/support/nat-normalise.ts:
// hashes, counters, quotes and rule order ignored).
// - test/fixtures/nat/iptables-1.21-legacy.v4.save, the iptables-mode node of the unit tests, the
//   nat lab and the diagnosis bundles (the shop cluster of test/fixtures/nat/README.md);
// - bench/kube-proxy-rules.ts, the rule generator of bench/nat-memory.
// What only kubelet writes on a real node (KUBE-MARK-DROP's rule, KUBE-KUBELET-CANARY) is named and
// left out; the API server's own default/kubernetes Service is left out (its endpoints are not
// the fixture's).
// The loop lab and the demo (src/demo/lab.ts) are an IPVS-mode node: this kernel has no IPVS (kube-proxy
// falls back to iptables mode here), so test/vm/kube-proxy-ipvs.test.ts compares their rules in the VM.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubeProxyRules } from '../../bench/kube-proxy-rules.js';
import { type ControlPlane, startControlPlane } from '../support/kube-control-plane.js';
import { createList } from '../support/kube-objects.js';
import { type KubeProxy, kubeCacheReady, startKubeProxy } from '../support/kube-proxy.js';
import { natDiff } from '../support/nat-normalise.js';
import { isRoot, Netns } from '../support/netns.js';

const FIXTURE = join(import.meta.dirname, '../fixtures/nat/iptables-1.21-legacy.v4.save');
const NODE = 'node-a';
const POD_CIDR = '10.244.0.0/16';
/** Lines of a whole node's nat table that kubelet writes, not kube-proxy. */
const KUBELET_LINES = [':KUBE-KUBELET-CANARY', '-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000'];

const ready = kubeCacheReady();
if (isRoot && !ready) {
  console.warn(
    '\n*** test/lab/kube-proxy-rules.test.ts SKIPPED: /var/cache/clbprobe-kube lacks the Kubernetes binaries. ' +
      'Run `sudo scripts/setup-kube.sh` (CI does) to build kube-apiserver and kube-proxy v1.20.2. ***\n',
  );
}

type Obj = Record<string, unknown>;

function lbService(
  ns: string,
  name: string,
  o: { clusterIp: string; lb?: string; etp: 'Local' | 'Cluster'; nodePort: number; hc?: number },
): Obj {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: ns },
    spec: {
      type: 'LoadBalancer',
      clusterIP: o.clusterIp,
      externalTrafficPolicy: o.etp,
      ...(o.hc ? { healthCheckNodePort: o.hc } : {}),
      ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080, nodePort: o.nodePort }],
      selector: { app: name },
    },
    status: { loadBalancer: { ingress: o.lb ? [{ ip: o.lb }] : [] } },
  };
}

function slice(
  ns: string,
  service: string,
  port: { name: string; port: number; protocol: string },
  endpoints: [string, string][],
): Obj {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `${service}-abcde`, namespace: ns, labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    endpoints: endpoints.map(([ip, node]) => ({ addresses: [ip], conditions: { ready: true }, nodeName: node })),
    ports: [port],
  };
}

const node = (name: string, ip: string, podCidr: string): Obj => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name },
  spec: { podCIDR: podCidr, podCIDRs: [podCidr] },
  status: { addresses: [{ type: 'InternalIP', address: ip }] },
});

/** The shop cluster of test/fixtures/nat/README.md (IPv4 Services of the 1.21 fixture). */
const SHOP: Obj[] = [
  node(NODE, '10.0.3.11', '10.244.1.0/24'),
  node('node-b', '10.0.3.12', '10.244.2.0/24'),
  lbService('shop', 'web', { clusterIp: '10.96.120.15', lb: '192.0.2.10', etp: 'Cluster', nodePort: 30080 }),
  slice('shop', 'web', { name: 'http', port: 8080, protocol: 'TCP' }, [
    ['10.244.1.5', NODE],
    ['10.244.2.7', 'node-b'],
  ]),
  lbService('shop', 'api', { clusterIp: '10.96.88.201', lb: '192.0.2.20', etp: 'Local', nodePort: 31080, hc: 32000 }),
  slice('shop', 'api', { name: 'http', port: 8080, protocol: 'TCP' }, [
    ['10.244.1.6', NODE],
    ['10.244.2.8', 'node-b'],
  ]),
  {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'kube-dns', namespace: 'kube-system' },
    spec: {
      clusterIP: '10.96.0.10',
      ports: [{ name: 'dns', port: 53, protocol: 'UDP', targetPort: 53 }],
      selector: { k8s: 'dns' },
    },
  },
  slice('kube-system', 'kube-dns', { name: 'dns', port: 53, protocol: 'UDP' }, [['10.244.1.2', NODE]]),
];

/** bench/nat-memory's shape: every endpoint on another node (the bench's node has none). */
const BENCH: Obj[] = [
  lbService('bench', 'svc-0', { clusterIp: '10.96.200.10', lb: '198.51.100.10', etp: 'Cluster', nodePort: 30100 }),
  slice('bench', 'svc-0', { name: 'http', port: 8080, protocol: 'TCP' }, [
    ['10.244.2.30', 'node-b'],
    ['10.244.2.31', 'node-b'],
  ]),
  lbService('bench', 'svc-1', {
    clusterIp: '10.96.200.11',
    lb: '198.51.100.11',
    etp: 'Local',
    nodePort: 30101,
    hc: 32100,
  }),
  slice('bench', 'svc-1', { name: 'http', port: 8080, protocol: 'TCP' }, [
    ['10.244.2.40', 'node-b'],
    ['10.244.2.41', 'node-b'],
  ]),
];

describe.skipIf(!isRoot || !ready)(
  'hand-written kube-proxy rules against the real kube-proxy v1.20.2 (iptables mode)',
  () => {
    let cp: ControlPlane;
    let ns: Netns | undefined;
    let kp: KubeProxy | undefined;
    let real = '';

    beforeAll(async () => {
      const t0 = Date.now();
      cp = await startControlPlane();
      try {
        ns = Netns.create('cbkp-r');
        ns.sh('ip link add eth0 type bridge && ip addr add 10.0.3.11/24 dev eth0 && ip link set eth0 up');
        await createList(cp, { items: [...SHOP, ...BENCH] });
        kp = await startKubeProxy(cp, ns, { nodeName: NODE, clusterCidr: POD_CIDR });
        real = await kp.waitForRules('every Service synced', (s) =>
          [
            'shop/web:http loadbalancer IP',
            'shop/api:http loadbalancer IP',
            'kube-system/kube-dns:dns cluster IP',
            'bench/svc-1:http loadbalancer IP',
          ].every((c) => s.includes(`"${c}"`)),
        );
        console.log(`control plane + kube-proxy synced: ${Date.now() - t0} ms`);
      } catch (e) {
        await kp?.stop();
        ns?.delete();
        await cp.stop();
        throw e;
      }
    }, 180_000);

    afterAll(async () => {
      await kp?.stop();
      ns?.delete();
      await cp?.stop();
    });

    it('test/fixtures/nat/iptables-1.21-legacy.v4.save matches what kube-proxy writes for the shop cluster', () => {
      const diff = natDiff(readFileSync(FIXTURE, 'utf8'), real, {
        ignoreServices: ['default/kubernetes', 'bench/svc-0', 'bench/svc-1'],
      });
      // Only in the fixture, a whole node's table: kubelet's chain and rule.
      expect(diff.sort()).toEqual(KUBELET_LINES.map((l) => `- ${l}`).sort());
    });

    it('bench/kube-proxy-rules.ts writes what kube-proxy writes for the same Services', () => {
      const generated = kubeProxyRules(BENCH, POD_CIDR).text;
      const diff = natDiff(generated, real, {
        ignoreServices: ['default/kubernetes', 'shop/web', 'shop/api', 'kube-system/kube-dns'],
      });
      // The bench node has kubelet's KUBE-MARK-DROP rule (its table is a whole node's), nothing else differs.
      expect(diff).toEqual(['- -A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000']);
    });
  },
);
