// node-name-mismatch on the real kube-proxy v1.20.2 (iptables mode, --hostname-override=node1)
// and the real API server: the loop lab's lab/web is ETP=Local with its one endpoint, the server
// pod 10.244.1.20, on node1 (pod CIDR 10.244.1.0/24). When the EndpointSlice files that endpoint
// under "node1.lab" (the FQDN) instead of "node1", kube-proxy takes it as remote: its rules say
// "has no local endpoints" for the LB IP, so external traffic to node1 is dropped. The compiled
// `clbprobe diagnose --node-name node1` with `kubectl get -o json` from that server reports
// node-name-mismatch with the endpoint, both names and the fix; filed under node1 again, kube-proxy
// has its local endpoint back and the finding is gone.
// Namespaces are cbad-*; kube-proxy and the namespaces are removed also on failure.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB } from '../../src/demo/lab.js';
import { createKubeLab, type KubeLab } from '../support/kube-lab.js';
import { kubeCacheReady } from '../support/kube-proxy.js';
import { isRoot } from '../support/netns.js';
import { requireBuiltCli } from '../support/run-cli.js';

const SLICE = '/apis/discovery.k8s.io/v1beta1/namespaces/lab/endpointslices/web-abcde';
/** kube-proxy v1.20's KUBE-XLB rule for an ETP=Local Service it sees no local endpoint of. */
const NO_LOCAL = /-A KUBE-XLB-\w+ -m comment --comment "lab\/web:http has no local endpoints" -j KUBE-MARK-DROP/;

const ready = kubeCacheReady();

describe.skipIf(!isRoot || !ready)('node-name-mismatch on real kube-proxy v1.20.2 rules (real API server)', () => {
  let k: KubeLab;
  let dir: string;

  beforeAll(async () => {
    requireBuiltCli();
    dir = mkdtempSync(join(tmpdir(), 'cbad-'));
    k = await createKubeLab('cbad-', 'Local');
  }, 180_000);

  afterAll(async () => {
    await k?.destroy();
    await k?.cp.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Files the server pod's endpoint under `host` (v1beta1: topology kubernetes.io/hostname). */
  async function fileUnder(host: string): Promise<void> {
    const endpoints = [
      {
        addresses: [LAB.serverPod],
        conditions: { ready: true },
        topology: { 'kubernetes.io/hostname': host },
        targetRef: { kind: 'Pod', namespace: 'lab', name: 'web-0' },
      },
    ];
    const r = await k.cp.request('PATCH', SLICE, { endpoints });
    expect(r.status, JSON.stringify(r.body).slice(0, 300)).toBe(200);
  }

  it('filed under node1: kube-proxy has the local endpoint and nothing is reported', async () => {
    expect(k.kubeProxy.save()).not.toMatch(NO_LOCAL);
    const d = k.diagnose(k.writeClusterFile(join(dir, 'node1.json')));
    expect(
      d.findings.some((f) => f.mechanism === 'proxy-mode' && f.service.name === 'web'),
      d.stderr,
    ).toBe(true);
    expect(d.findings.filter((f) => f.mechanism === 'node-name-mismatch')).toEqual([]);
  }, 60_000);

  it('filed under node1.lab: kube-proxy sees no local endpoint, clbprobe says why', async () => {
    await fileUnder('node1.lab');
    const save = await k.kubeProxy.waitForRules('lab/web has no local endpoints', (s) => NO_LOCAL.test(s));
    expect(save).toMatch(NO_LOCAL);
    const d = k.diagnose(k.writeClusterFile(join(dir, 'node1-lab.json')));
    const found = d.findings.filter((f) => f.mechanism === 'node-name-mismatch');
    expect(
      found.map((f) => `${f.service.namespace}/${f.service.name} ${f.severity}`),
      d.stderr,
    ).toEqual(['lab/web risk']);
    const f = found[0]!;
    expect(f.summary).toContain(`filed under "node1.lab", not this node's name "node1"`);
    expect(f.evidence).toContain(
      `endpoint ${LAB.serverPod}:${LAB.serverPort} (ready) filed under nodeName "node1.lab", at an address of this node`,
    );
    expect(f.evidence).toContain('"node1.lab" is the FQDN of "node1"');
    expect(f.remedy).toContain('--hostname-override');
  }, 90_000);

  it('filed under node1 again: kube-proxy has its local endpoint back, the finding is gone', async () => {
    await fileUnder(LAB.node1Name);
    await k.kubeProxy.waitForRules(
      'lab/web local endpoint back',
      (s) => !NO_LOCAL.test(s) && s.includes('lab/web:http'),
    );
    const d = k.diagnose(k.writeClusterFile(join(dir, 'node1-again.json')));
    expect(
      d.findings.some((f) => f.mechanism === 'proxy-mode' && f.service.name === 'web'),
      d.stderr,
    ).toBe(true);
    expect(d.findings.filter((f) => f.mechanism === 'node-name-mismatch')).toEqual([]);
  }, 90_000);
});
