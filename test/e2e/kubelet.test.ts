// clbprobe on a real two-node Kubernetes v1.20.2 cluster (issue 39): kubelet + containerd + runc,
// kube-proxy in iptables mode, a CNI bridge, the scheduler and controller-manager
// (test/support/kube-node.ts), and a cloud LB that keeps the client address.
// - Install: `kubectl apply -k` of deploy/ with only the image changed, as `kustomize edit set image`
//   changes it; without prometheus-operator's CRDs, without podmonitor.yaml and prometheusrule.yaml,
//   as deploy/kustomization.yaml says.
// - The DaemonSet's pods are Running and Ready on both nodes, the agent under the Localhost seccomp
//   profile the init container installed and with exactly its four capabilities, read from /proc.
// - A real loop: a client pod on node1 calls the LB (a hostname-only LoadBalancer Service, so
//   kube-proxy has no rule for the LB address), the LB sends the connection back to node1's NodePort
//   keeping the pod's address, and the ETP=Local server pod on node1 answers the client directly. The
//   agent on node1 counts loop_return and raises the active L4-loop finding; node2's counts nothing.
// - /metrics answers a ServiceAccount token bound as the PodMonitor's scrape needs, and refuses one without.
// - `kubectl clbprobe evidence --all-nodes` as a user with only deploy/oncall-rbac.yaml's role goes
//   through the real API server's service proxy and the relay to both agents; a user without it is refused.
// - Lifecycle: a rolling update keeps counting; with `--tc-attach=tc` (the cls_bpf path of kernels
//   before 6.6) deleting a hung agent's pod leaves no tc filter behind, only preStop having removed them;
//   an agent whose liveness probe fails is restarted by the kubelet and counts the loop again.
// - With prometheus-operator's CRDs installed (minimal ones: test/fixtures/prometheus-operator/crds.yaml),
//   `kubectl apply -k` of deploy/ as shipped also creates the PodMonitor and PrometheusRule as written.
// Namespaces are cbk8s-*; every process, cgroup and namespace is removed also on failure.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { TC_HANDLE, TC_PRIORITY } from '../../src/capture/attach.js';
import { parseSamples, type Sample } from '../../src/export/parse-samples.js';
import { REPO_ROOT } from '../support/daemonset.js';
import { KUBE_BIN } from '../support/kube-control-plane.js';
import { BUSYBOX_IMAGE, CLUSTER, type KubeCluster, nodeImages, startKubeCluster } from '../support/kube-node.js';
import { isRoot } from '../support/netns.js';
import { buildProductImage } from '../support/product-image.js';
import { sleep, until } from '../support/wait.js';

const PRODUCT_IMAGE = 'localhost/clbprobe:0.1.0';
const CAP_BITS: Record<string, number> = { NET_ADMIN: 12, NET_RAW: 13, PERFMON: 38, BPF: 39 };
const LB_HOSTNAME = 'web-0123456789.lb.cbk8s.example';
const NODE_PORT = 30080;
/** Each node's uplink, where the agent's counters attach. */
const UPLINK = 'eth0';
/** A line of `tc filter show` for our cls_bpf filter (handle and priority from src/capture/attach.ts), with its program id. */
const OUR_TC_FILTER = new RegExp(`pref ${TC_PRIORITY} bpf .*handle 0x${TC_HANDLE.toString(16)} .*\\bid (\\d+)`);
/**
 * kubectl 1.20's built-in kustomize (v2.0.3) cannot read deploy/kustomization.yaml ("labels", the
 * generator's "options"): apply -k needs a kubectl whose kustomize is v4 or newer, as users have.
 */
const KUBECTL_APPLY = ['/usr/bin/kubectl', '/usr/local/bin/kubectl'].find((k) => {
  const v = spawnSync(k, ['version', '--client'], { encoding: 'utf8' }).stdout ?? '';
  return /Kustomize Version: v[4-9]/.test(v);
});

const ready =
  isRoot &&
  ['kubelet', 'kube-controller-manager', 'kube-scheduler', 'kube-apiserver', 'kube-proxy'].every((b) =>
    existsSync(join(KUBE_BIN, b)),
  ) &&
  existsSync('/usr/bin/containerd') &&
  KUBECTL_APPLY !== undefined;
if (isRoot && !ready) {
  console.warn(
    `\n*** test/e2e/kubelet.test.ts SKIPPED: needs scripts/setup-kube.sh's kubelet, containerd (scripts/setup.sh), ` +
      `and a kubectl with kustomize >= v4. ***\n`,
  );
}

const find = (s: Sample[], name: string, labels: Record<string, string>): number | undefined =>
  s.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))?.value;
const web = { namespace: 'lab', service: 'web' };

describe.skipIf(!ready)('clbprobe on a real kubelet + containerd cluster (Kubernetes v1.20.2, two nodes)', () => {
  let k: KubeCluster;
  let work: string;
  const timings: Record<string, number> = {};
  const timed = async <T>(name: string, f: () => T | Promise<T>): Promise<T> => {
    const t = Date.now();
    const v = await f();
    timings[name] = (Date.now() - t) / 1000;
    return v;
  };
  /** The agent pod on each node, by node name. */
  const agents = new Map<string, string>();
  const inNode = (i: number, cmd: string[]): string => {
    const r = spawnSync('nsenter', [`--net=${k.nodes[i]!.netns.path}`, ...cmd], { encoding: 'utf8', timeout: 30_000 });
    if (r.status !== 0) throw new Error(`${cmd.join(' ')} in ${k.nodes[i]!.name} exited ${r.status}: ${r.stderr}`);
    return r.stdout;
  };
  /** `kubectl apply -k DIR` with the kubectl whose kustomize reads deploy/kustomization.yaml. */
  const applyKustomization = (dir: string): void => {
    const r = spawnSync(
      'nsenter',
      [
        `--net=${k.nodes[0]!.netns.path}`,
        KUBECTL_APPLY!,
        '--kubeconfig',
        k.kubeconfig('admin'),
        '--cache-dir',
        join(work, 'cache'),
        'apply',
        '-k',
        dir,
      ],
      { encoding: 'utf8', timeout: 120_000 },
    );
    if (r.status !== 0) throw new Error(`kubectl apply -k: ${r.stderr}`);
  };
  /** The DaemonSet's pods by node name, without those being deleted. */
  const agentPods = (): Map<string, string> => {
    const pods = new Map<string, string>();
    const lines = k
      .kubectl([
        '-n',
        'clbprobe',
        'get',
        'pods',
        '-l',
        'app.kubernetes.io/component!=evidence-relay',
        '-o',
        'jsonpath={range .items[*]}{.spec.nodeName} {.metadata.name} {.metadata.ownerReferences[0].kind} {.metadata.deletionTimestamp}{"\\n"}{end}',
      ])
      .trim()
      .split('\n');
    for (const line of lines) {
      const [node, pod, kind, deleting] = line.split(' ');
      if (kind === 'DaemonSet' && !deleting) pods.set(node!, pod!);
    }
    return pods;
  };
  const podField = (pod: string, jsonpath: string): string =>
    k.kubectl(['-n', 'clbprobe', 'get', 'pod', pod, '-o', `jsonpath=${jsonpath}`]);
  const isReady = (pod: string): boolean => podField(pod, '{.status.conditions[?(@.type=="Ready")].status}') === 'True';
  const restartCount = (pod: string): number =>
    Number(podField(pod, '{.status.containerStatuses[?(@.name=="agent")].restartCount}'));
  /** The node's Ready agent pod other than `old`, once there is one. */
  const readyAgent = (i: number, what: string, old?: string): Promise<string> =>
    until(
      what,
      120_000,
      () => {
        const pod = agentPods().get(k.nodes[i]!.name);
        return pod && pod !== old && isReady(pod) ? pod : undefined;
      },
      1000,
    );
  /** The pod's events, one `REASON: MESSAGE` a line. */
  const podEvents = (pod: string): string =>
    k.kubectl([
      '-n',
      'clbprobe',
      'get',
      'events',
      '--field-selector',
      `involvedObject.name=${pod}`,
      '-o',
      'jsonpath={range .items[*]}{.reason}: {.message}{"\\n"}{end}',
    ]);
  /** Our cls_bpf filters' program ids on the node's uplink, per hook (empty: none). */
  const tcFilters = (i: number): { ingress: string[]; egress: string[] } => {
    const ids = (hook: string) =>
      inNode(i, ['tc', 'filter', 'show', 'dev', UPLINK, hook])
        .split('\n')
        .flatMap((l) => OUR_TC_FILTER.exec(l)?.[1] ?? []);
    return { ingress: ids('ingress'), egress: ids('egress') };
  };
  const hasClsact = (i: number): boolean => /^qdisc clsact /m.test(inNode(i, ['tc', 'qdisc', 'show', 'dev', UPLINK]));
  /** The host PID of the agent process in the node's network namespace (hostNetwork). */
  const agentPid = (i: number): number => {
    const netns = `net:[${statSync(k.nodes[i]!.netns.path).ino}]`;
    const pid = [...new Set(k.pids())].find((p) => {
      const argv = tryRead(`/proc/${p}/cmdline`).split('\0');
      return (
        argv.includes('/app/dist/bundle/main.js') &&
        argv.includes('agent') &&
        tryReadlink(`/proc/${p}/ns/net`) === netns
      );
    });
    if (pid === undefined) throw new Error(`no agent process in ${k.nodes[i]!.name}`);
    return pid;
  };
  const processState = (pid: number): string | undefined => /^State:\s+(\S)/m.exec(tryRead(`/proc/${pid}/status`))?.[1];
  const agentLog = (pod: string): string => k.kubectl(['-n', 'clbprobe', 'logs', pod, '-c', 'agent']);
  const metrics = (i: number, token: string): { code: string; body: string } => {
    const out = inNode(i, [
      'curl',
      '-s',
      '-m',
      '5',
      '-w',
      '\n%{http_code}',
      '-H',
      `Authorization: Bearer ${token}`,
      `http://${k.nodes[i]!.ip}:9811/metrics`,
    ]);
    const at = out.lastIndexOf('\n');
    return { code: out.slice(at + 1), body: out.slice(0, at) };
  };
  const saToken = (ns: string, sa: string): Promise<string> =>
    until(
      `a token for ${ns}/${sa}`,
      30_000,
      () => {
        const secret = k.kubectl(['-n', ns, 'get', 'sa', sa, '-o', 'jsonpath={.secrets[0].name}']).trim();
        if (!secret) return undefined;
        const b64 = k.kubectl(['-n', ns, 'get', 'secret', secret, '-o', 'jsonpath={.data.token}']).trim();
        return b64 ? Buffer.from(b64, 'base64').toString('utf8') : undefined;
      },
      500,
    );
  let promToken = '';
  /** Loops the client pod through the LB until node1's agent counts loop_return and has the active L4-loop finding. */
  const loopUntilFound = (what: string): Promise<true> =>
    until(
      what,
      90_000,
      async () => {
        // The connection never completes: the server's answer goes straight to the client, not back through the LB.
        // (busybox-static's wget faults on this machine; nc is enough for a TCP connection.)
        const r = k.kubectlResult([
          '-n',
          'lab',
          'exec',
          'client',
          '--',
          'sh',
          '-c',
          `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 ${CLUSTER.vip} 80`,
        ]);
        expect(r.stdout).not.toContain('HTTP/1.0 200');
        const s = parseSamples(metrics(0, promToken).body);
        const looped = (find(s, 'clbprobe_lb_path_packets_total', { ...web, kind: 'loop_return' }) ?? 0) > 0;
        return looped && find(s, 'clbprobe_findings_active', { ...web, mechanism: 'L4-loop', severity: 'active' }) === 1
          ? true
          : undefined;
      },
      2000,
    );

  beforeAll(async () => {
    const t0 = Date.now();
    work = mkdtempSync(join(tmpdir(), 'cbk8s-deploy-'));
    // This checkout's image (podman's layer cache makes it quick when the image test built it already).
    await timed('podman build', () => buildProductImage(PRODUCT_IMAGE, work));
    const images = await timed('images (podman save when the image changed)', () => nodeImages(PRODUCT_IMAGE));
    k = await timed('cluster up (2 nodes Ready)', () => startKubeCluster(images, 2));
    await timed('kubectl apply -k to rolled out', () => {
      applyKustomization(userDeploy(join(work, 'deploy'), { operator: false }));
      k.kubectl(['-n', 'clbprobe', 'rollout', 'status', 'ds/clbprobe', '--timeout=240s'], { timeoutMs: 250_000 });
    });
    for (const [node, pod] of agentPods()) agents.set(node, pod);
    // Prometheus' ServiceAccount as the PodMonitor's scrape class uses it: bound to get /metrics.
    k.kubectl(['apply', '-f', '-'], {
      input: `apiVersion: v1
kind: Namespace
metadata: {name: monitoring}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: monitoring}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: unbound, namespace: monitoring}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cbk8s-metrics-reader}
rules: [{nonResourceURLs: [/metrics], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cbk8s-prometheus}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cbk8s-metrics-reader}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: monitoring}]
`,
    });
    promToken = await saToken('monitoring', 'prometheus');
    timings['beforeAll total'] = (Date.now() - t0) / 1000;
  }, 900_000);

  afterAll(async () => {
    console.log(`kubelet e2e timings (s): ${JSON.stringify(timings)}`);
    if (k) {
      // The whole cluster's footprint, for the CI budget: daemons, shims and containers.
      const rss = [...new Set(k.pids())].reduce(
        (sum, p) => sum + Number(/^VmRSS:\s+(\d+)/m.exec(tryRead(`/proc/${p}/status`))?.[1] ?? 0),
        0,
      );
      console.log(`kubelet e2e cluster RSS: ${Math.round(rss / 1024)} MiB`);
    }
    await k?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  }, 120_000);

  it('runs the DaemonSet on both nodes, Ready, under the Localhost seccomp profile with exactly its four capabilities', () => {
    expect([...agents.keys()].sort()).toEqual(k.nodes.map((n) => n.name).sort());
    for (const pod of agents.values()) {
      const status = JSON.parse(k.kubectl(['-n', 'clbprobe', 'get', 'pod', pod, '-o', 'json'])) as {
        status: { phase: string; conditions: { type: string; status: string }[] };
      };
      expect(status.status.phase).toBe('Running');
      expect(status.status.conditions.find((c) => c.type === 'Ready')?.status).toBe('True');
      // PID 1 of the agent container is the agent itself (the manifest's command): its /proc status is the agent's.
      const proc = k.kubectl([
        '-n',
        'clbprobe',
        'exec',
        pod,
        '-c',
        'agent',
        '--',
        'cat',
        '/proc/1/status',
        '/proc/1/cmdline',
      ]);
      expect(proc).toMatch(/^Seccomp:\s+2$/m);
      const capEff = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)$/m.exec(proc)![1]}`);
      const want = Object.values(CAP_BITS).reduce((a, b) => a | (1n << BigInt(b)), 0n);
      expect(capEff.toString(16)).toBe(want.toString(16));
    }
    // The init container wrote the profile where the kubelet looks for Localhost profiles.
    for (const n of k.nodes) expect(existsSync(join(n.dir, 'kubelet/seccomp/clbprobe/clbprobe.json'))).toBe(true);
  });

  it('on node1, counts loop_return and raises the active L4-loop finding for a pod looping through the LB; node2 counts nothing', async () => {
    const n1 = k.nodes[0]!;
    k.kubectl(['apply', '-f', '-'], {
      input: `apiVersion: v1
kind: Namespace
metadata: {name: lab}
---
apiVersion: v1
kind: Pod
metadata: {name: server, namespace: lab, labels: {app: web}}
spec:
  nodeName: ${n1.name}
  containers:
  - {name: httpd, image: ${BUSYBOX_IMAGE}, imagePullPolicy: Never, command: [httpd, -f, -p, '8080', -h, /etc], ports: [{containerPort: 8080}],
     readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: lab}
spec:
  nodeSelector: {kubernetes.io/hostname: ${n1.name}}
  containers:
  - {name: client, image: ${BUSYBOX_IMAGE}, imagePullPolicy: Never, command: [sleep, '3600']}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: lab}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, nodePort: ${NODE_PORT}}]
`,
    });
    k.kubectl(['-n', 'lab', 'wait', '--for=condition=Ready', 'pod/server', 'pod/client', '--timeout=120s'], {
      timeoutMs: 130_000,
    });
    expect(k.kubectl(['-n', 'lab', 'get', 'pod', 'client', '-o', 'jsonpath={.spec.nodeName}'])).toBe(n1.name);
    // The cloud controller's part: the LB's hostname in the Service's status, and the LB itself.
    const status = JSON.stringify({ status: { loadBalancer: { ingress: [{ hostname: LB_HOSTNAME }] } } });
    inNode(0, [
      'curl',
      '-sf',
      '-o',
      '/dev/null',
      '--cacert',
      join(k.dir, 'pki/ca.crt'),
      '-X',
      'PATCH',
      '-H',
      'Content-Type: application/merge-patch+json',
      '-H',
      `Authorization: Bearer ${adminToken(k)}`,
      '--data',
      status,
      `https://${n1.ip}:6443/api/v1/namespaces/lab/services/web/status`,
    ]);
    k.setLoadBalancer(LB_HOSTNAME, 80, n1, NODE_PORT);
    await loopUntilFound('the looped connection and node1 agent findings');
    await sleep(1000);
    const s2 = parseSamples(metrics(1, promToken).body);
    expect(find(s2, 'clbprobe_lb_path_packets_total', { ...web, kind: 'loop_return' }) ?? 0).toBe(0);
    expect(find(s2, 'clbprobe_findings_active', { ...web, severity: 'active' }) ?? 0).toBe(0);
  }, 180_000);

  it("answers /metrics to a token bound as the PodMonitor's scrape needs and refuses one without", async () => {
    const bound = metrics(0, promToken);
    expect(bound.code).toBe('200');
    expect(bound.body).toMatch(/^clbprobe_/m);
    const unbound = metrics(0, await saToken('monitoring', 'unbound'));
    expect(unbound.code).toBe('403');
    expect(metrics(0, 'not-a-token').code).toBe('401');
  });

  it("gives on-call `kubectl clbprobe evidence --all-nodes` through the API server's service proxy and the relay; refuses a user without the role", () => {
    k.kubectl(['apply', '-n', 'clbprobe', '-f', join(REPO_ROOT, 'deploy/oncall-rbac.yaml')]);
    k.kubectl(['-n', 'clbprobe', 'create', 'rolebinding', 'cbk8s-oncall', '--role=clbprobe-oncall', '--user=oncall']);
    // The relay and the agents show a Service's evidence to whoever may read the Service (deploy/oncall-rbac.yaml).
    k.kubectl(['-n', 'lab', 'create', 'rolebinding', 'cbk8s-oncall-view', '--clusterrole=view', '--user=oncall']);
    k.kubectl(['-n', 'clbprobe', 'rollout', 'status', 'deploy/clbprobe-evidence-relay', '--timeout=120s'], {
      timeoutMs: 130_000,
    });
    const plugin = (user: 'oncall' | 'nobody') =>
      spawnSync(
        'nsenter',
        [
          `--net=${k.nodes[0]!.netns.path}`,
          join(REPO_ROOT, 'bin/kubectl-clbprobe'),
          'evidence',
          '--all-nodes',
          '--service',
          'lab/web',
          '--kubeconfig',
          k.kubeconfig(user),
        ],
        {
          encoding: 'utf8',
          timeout: 60_000,
        },
      );
    const ok = plugin('oncall');
    expect(ok.status, ok.stderr).toBe(0);
    for (const n of k.nodes) expect(ok.stdout).toContain(n.name);
    // node1's answer has the looping pair: the client pod's own address came back from the LB.
    expect(ok.stdout).toContain(k.kubectl(['-n', 'lab', 'get', 'pod', 'client', '-o', 'jsonpath={.status.podIP}']));
    const refused = plugin('nobody');
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/forbidden|not allowed|403/i);
  }, 180_000);

  it('keeps the agent under its memory limit (RSS under the real kubelet)', () => {
    for (const pod of agents.values()) {
      const rssKb = Number(
        /^VmRSS:\s+(\d+) kB$/m.exec(
          k.kubectl(['-n', 'clbprobe', 'exec', pod, '-c', 'agent', '--', 'cat', '/proc/1/status']),
        )![1],
      );
      const limit = k.kubectl([
        '-n',
        'clbprobe',
        'get',
        'pod',
        pod,
        '-o',
        'jsonpath={.spec.containers[?(@.name=="agent")].resources.limits.memory}',
      ]);
      console.log(`agent ${pod}: RSS ${Math.round(rssKb / 1024)} MiB, limit ${limit}`);
      expect(rssKb * 1024).toBeLessThan(bytes(limit));
      expect(
        k.kubectl([
          '-n',
          'clbprobe',
          'get',
          'pod',
          pod,
          '-o',
          'jsonpath={.status.containerStatuses[?(@.name=="agent")].restartCount}',
        ]),
      ).toBe('0');
    }
  });

  it('keeps counting through a rolling update of the DaemonSet (a changed annotation)', async () => {
    const before = new Set(agents.values());
    k.kubectl([
      '-n',
      'clbprobe',
      'patch',
      'ds',
      'clbprobe',
      '-p',
      JSON.stringify({ spec: { template: { metadata: { annotations: { 'cbk8s/rolled': String(Date.now()) } } } } }),
    ]);
    k.kubectl(['-n', 'clbprobe', 'rollout', 'status', 'ds/clbprobe', '--timeout=240s'], { timeoutMs: 250_000 });
    const now = k
      .kubectl([
        '-n',
        'clbprobe',
        'get',
        'pods',
        '-o',
        'jsonpath={range .items[?(@.metadata.ownerReferences[0].kind=="DaemonSet")]}{.metadata.name}{"\\n"}{end}',
      ])
      .trim()
      .split('\n');
    expect(now).toHaveLength(2);
    for (const p of now) expect(before.has(p)).toBe(false);
    // The new agent on node1 starts from zero and sees the loop again.
    await loopUntilFound("node1's new agent counting the loop");
  }, 300_000);

  it('leaves no cls_bpf filter behind when an agent pod is deleted: preStop removes them (--tc-attach=tc, the pre-6.6 path)', async () => {
    // As an SRE would force the pre-6.6 path on this 6.6+ kernel: a JSON patch appending the flag to the
    // DaemonSet's args (a rolling update of both nodes). The checks after this one work in either mode, so it stays.
    const addFlag = [{ op: 'add', path: '/spec/template/spec/containers/0/args/-', value: '--tc-attach=tc' }];
    k.kubectl(['-n', 'clbprobe', 'patch', 'ds', 'clbprobe', '--type=json', '-p', JSON.stringify(addFlag)]);
    k.kubectl(['-n', 'clbprobe', 'rollout', 'status', 'ds/clbprobe', '--timeout=240s'], { timeoutMs: 250_000 });
    const pod = await readyAgent(0, "node1's agent with --tc-attach=tc Ready");
    expect(agentLog(pod)).toMatch(/"attach":"tc".*"eBPF counters attached"/);
    const attached = tcFilters(0);
    expect(attached.ingress).toHaveLength(1);
    expect(attached.egress).toHaveLength(1);
    // A hung agent: stopped, it cannot detach its filters at SIGTERM and is SIGKILLed at the end of its 10 s grace
    // period, and the replacement cannot attach (or remove leftovers) while the stopped one holds :9811. Filters
    // gone while it is still stopped, with their clsact qdisc (which the agent never deletes), were preStop's work.
    const pid = agentPid(0);
    process.kill(pid, 'SIGSTOP');
    try {
      k.kubectl(['-n', 'clbprobe', 'delete', 'pod', pod, '--wait=false']);
      await until(
        'the preStop clean-up of the cls_bpf filters and their clsact qdisc on node1',
        10_000,
        () => {
          const left = tcFilters(0);
          return left.ingress.length + left.egress.length === 0 && !hasClsact(0) ? true : undefined;
        },
        100,
      ).catch((e: Error) => {
        throw new Error(`${e.message}; left: ${JSON.stringify(tcFilters(0))}; events:\n${podEvents(pod)}`);
      });
      expect(processState(pid)).toBe('T');
    } finally {
      resume(pid);
    }
    const replacement = await readyAgent(0, "node1's replacement agent Ready", pod);
    // One filter per hook, the new agent's programs, and nothing left for it to remove.
    const reattached = tcFilters(0);
    expect(reattached.ingress).toHaveLength(1);
    expect(reattached.egress).toHaveLength(1);
    expect(reattached.ingress[0]).not.toBe(attached.ingress[0]);
    expect(reattached.egress[0]).not.toBe(attached.egress[0]);
    expect(agentLog(replacement)).not.toContain('left by a previous run');
    await loopUntilFound("node1's replacement agent counting the loop with cls_bpf filters");
  }, 420_000);

  it('is restarted by the kubelet when its liveness probe fails, and comes back Ready counting the loop', async () => {
    const pod = await readyAgent(0, "node1's agent Ready");
    const restarts = restartCount(pod);
    // A stopped agent answers no /healthz: periodSeconds 20 × failureThreshold 3, then the 10 s grace period
    // (the SIGTERM waits while it is stopped) before the SIGKILL; 150 s bounds it with room for a loaded machine.
    const pid = agentPid(0);
    process.kill(pid, 'SIGSTOP');
    try {
      await until(
        'the kubelet restarting the stopped agent',
        150_000,
        () => (restartCount(pod) > restarts ? true : undefined),
        2000,
      );
    } finally {
      resume(pid);
    }
    const events = podEvents(pod);
    expect(events).toMatch(/^Unhealthy: Liveness probe failed/m);
    expect(events).toMatch(/^Killing: Container agent failed liveness probe, will be restarted/m);
    expect(await readyAgent(0, "node1's restarted agent Ready")).toBe(pod);
    // The restarted agent counts with eBPF again: nothing its predecessor attached is in its way.
    expect(agentLog(pod)).toContain('"eBPF counters attached"');
    await loopUntilFound("node1's restarted agent counting the loop");
  }, 300_000);

  it("applies the PodMonitor and PrometheusRule as shipped once prometheus-operator's CRDs are installed", () => {
    k.kubectl(['apply', '-f', join(REPO_ROOT, 'test/fixtures/prometheus-operator/crds.yaml')]);
    k.kubectl(
      [
        'wait',
        '--for=condition=Established',
        'crd/podmonitors.monitoring.coreos.com',
        'crd/prometheusrules.monitoring.coreos.com',
        '--timeout=60s',
      ],
      { timeoutMs: 70_000 },
    );
    // With the operator deploy/README.md's `kubectl apply -k deploy/` is all: nothing removed, the image set.
    applyKustomization(userDeploy(join(work, 'deploy-operator'), { operator: true }));
    for (const [kind, file] of [
      ['podmonitor', 'podmonitor.yaml'],
      ['prometheusrule', 'prometheusrule.yaml'],
    ] as const) {
      const applied = JSON.parse(k.kubectl(['-n', 'clbprobe', 'get', kind, 'clbprobe', '-o', 'json'])) as {
        metadata: { labels: Record<string, string> };
        spec: unknown;
      };
      const shipped = parseYaml(readFileSync(join(REPO_ROOT, 'deploy', file), 'utf8')) as { spec: unknown };
      expect(applied.spec).toEqual(shipped.spec);
      expect(applied.metadata.labels).toMatchObject({
        'app.kubernetes.io/name': 'clbprobe',
        'app.kubernetes.io/part-of': 'clbprobe',
      });
    }
  });
});

/**
 * deploy/ as a user installs it, copied to `dir`: the image set as `kustomize edit set image
 * clbprobe=localhost/clbprobe:0.1.0` writes it and, without prometheus-operator, podmonitor.yaml and
 * prometheusrule.yaml removed as deploy/README.md says (`kustomize edit remove resource`).
 */
function userDeploy(dir: string, o: { operator: boolean }): string {
  cpSync(join(REPO_ROOT, 'deploy'), dir, { recursive: true });
  const kfile = join(dir, 'kustomization.yaml');
  const [name, tag] = PRODUCT_IMAGE.split(':') as [string, string];
  const resources = readFileSync(kfile, 'utf8')
    .split('\n')
    .filter((l) => o.operator || !/^\s*- (podmonitor|prometheusrule)\.yaml$/.test(l))
    .join('\n')
    .trimEnd();
  writeFileSync(kfile, `${resources}\nimages:\n- name: clbprobe\n  newName: ${name}\n  newTag: ${tag}\n`);
  return dir;
}

function bytes(q: string): number {
  const m = /^(\d+)(Ki|Mi|Gi)?$/.exec(q);
  if (!m) throw new Error(`quantity ${q}`);
  return Number(m[1]) * ({ Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3 }[m[2] ?? ''] ?? 1);
}

function tryRead(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

function tryReadlink(file: string): string {
  try {
    return readlinkSync(file);
  } catch {
    return '';
  }
}

/** SIGCONT for a process stopped by a test; it may be gone already (killed by the kubelet). */
function resume(pid: number): void {
  try {
    process.kill(pid, 'SIGCONT');
  } catch {
    // gone
  }
}

function adminToken(k: KubeCluster): string {
  return /token: ([^}\s]+)/.exec(readFileSync(k.kubeconfig('admin'), 'utf8'))![1]!;
}
