// A real two-node Kubernetes v1.20.2 cluster for the tests, entirely in network namespaces the test
// creates (cbk8s-*): etcd, kube-apiserver, kube-controller-manager and kube-scheduler in node1's
// namespace (a control-plane node); containerd 1.6 + runc, the kubelet and kube-proxy (iptables
// mode) on each node, in a private mount namespace of its own (test/support/kube-node-inside.sh);
// a CNI bridge per node without masquerade (pod addresses are routable, as on a VPC CNI); and a
// cloud-LB namespace that routes between the nodes, DNATs the LB address to a node's NodePort
// keeping the client address (as the loop lab's LB does: src/demo/lab.ts), and answers DNS for
// the LB's hostname. Binaries come from scripts/setup-kube.sh's cache; the images are imported
// into each node's containerd from docker-archives (no registry). stop() removes every process,
// cgroup and namespace, also after a failed start. The recipe this follows, with its reasons:
// ../shared/reference/real-node.md.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type DnsServer, startDns } from './dns-lab.js';
import { binary, KUBE_BIN, KUBE_CACHE, makeApiServerCerts, openssl } from './kube-control-plane.js';
import { Netns, vethPair } from './netns.js';
import { sleep, until } from './wait.js';

export const CLUSTER = {
  serviceCidr: '10.96.0.0/16',
  clusterCidr: '10.244.0.0/16',
  /** The cloud LB's address and the DNS server that names it, both on the LB namespace's loopback. */
  vip: '10.0.100.100',
  dns: '10.0.100.53',
} as const;

export const PAUSE_IMAGE = 'localhost/cbk8s-pause:1';
export const BUSYBOX_IMAGE = 'localhost/cbk8s-busybox:1';
const INSIDE = join(import.meta.dirname, 'kube-node-inside.sh');
const IMAGE_CACHE = join(KUBE_CACHE, 'images');

/** Users of the static token file: the components, an admin, and two people. */
const USERS = {
  admin: ['admin', 'system:masters'],
  cm: ['system:kube-controller-manager', ''],
  sched: ['system:kube-scheduler', ''],
  proxy: ['system:kube-proxy', ''],
  oncall: ['oncall', ''],
  nobody: ['nobody', ''],
} as const;
export type ClusterUser = keyof typeof USERS;

export interface KubeNode {
  /** The Node object's name. */
  readonly name: string;
  readonly ip: string;
  readonly podCidr: string;
  readonly netns: Netns;
  /** The node's state directory (logs/ has every daemon's log). */
  readonly dir: string;
}

export interface KubeCluster {
  readonly nodes: KubeNode[];
  readonly lb: Netns;
  readonly dir: string;
  /** kubectl 1.20 in node1's namespace as `user` (admin by default); throws with its stderr. */
  kubectl(args: string[], opts?: { user?: ClusterUser; input?: string; timeoutMs?: number }): string;
  /** The same, never throwing. */
  kubectlResult(
    args: string[],
    opts?: { user?: ClusterUser; input?: string },
  ): { status: number | null; stdout: string; stderr: string };
  /** A kubeconfig file for `user`, valid inside node1's namespace. */
  kubeconfig(user: ClusterUser): string;
  /** The cloud LB sends LB_ADDRESS:port to node:nodePort, keeping the client's address; answers `hostname` with the LB address. */
  setLoadBalancer(hostname: string, port: number, node: KubeNode, nodePort: number): void;
  /** PIDs of every process of the cluster (daemons, shims, containers). */
  pids(): number[];
  stop(): Promise<void>;
}

function run(cmd: string, args: string[], opts: { input?: string; timeoutMs?: number } = {}): string {
  const r = spawnSync(cmd, args, {
    encoding: 'utf8',
    input: opts.input,
    timeout: opts.timeoutMs ?? 120_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.slice(0, 6).join(' ')} exited ${r.status ?? r.signal}: ${r.stderr}`);
  return r.stdout;
}

/**
 * The docker-archives every node imports: a static pause and a busybox built FROM scratch (no RUN
 * step and --network=none: podman would otherwise set up its CNI network in the root namespace),
 * cached; and `image` (the product image from the image test), saved again only when its ID changed.
 */
export function nodeImages(image: string): string[] {
  mkdirSync(IMAGE_CACHE, { recursive: true });
  const pause = join(IMAGE_CACHE, 'pause.tar');
  const busybox = join(IMAGE_CACHE, 'busybox.tar');
  if (!existsSync(pause) || !existsSync(busybox)) {
    const d = mkdtempSync(join(tmpdir(), 'cbk8s-img-'));
    try {
      mkdirSync(join(d, 'pause'));
      writeFileSync(
        join(d, 'pause/pause.c'),
        '#include <signal.h>\n#include <unistd.h>\n#include <sys/wait.h>\nstatic void term(int s) { (void)s; _exit(0); }\n' +
          'static void chld(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }\n' +
          'int main(void) { signal(SIGINT, term); signal(SIGTERM, term); signal(SIGCHLD, chld); for (;;) pause(); }\n',
      );
      run('gcc', ['-static', '-O2', '-s', '-o', join(d, 'pause/pause'), join(d, 'pause/pause.c')]);
      writeFileSync(join(d, 'pause/Containerfile'), 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n');
      mkdirSync(join(d, 'bb/root/bin'), { recursive: true });
      run('cp', ['/bin/busybox', join(d, 'bb/root/bin/busybox')]);
      for (const applet of run('/bin/busybox', ['--list'])
        .split('\n')
        .filter((a) => a && a !== 'busybox')) {
        run('ln', ['-sf', 'busybox', join(d, 'bb/root/bin', applet)]);
      }
      writeFileSync(join(d, 'bb/Containerfile'), 'FROM scratch\nCOPY root/ /\nENV PATH=/bin\nCMD ["/bin/sh"]\n');
      for (const [ctx, tag, tar] of [
        ['pause', PAUSE_IMAGE, pause],
        ['bb', BUSYBOX_IMAGE, busybox],
      ] as const) {
        run('podman', ['build', '--network=none', '-q', '-t', tag, join(d, ctx)]);
        run('podman', ['save', '-q', '--format', 'docker-archive', '-o', `${tar}.tmp`, tag]);
        run('mv', [`${tar}.tmp`, tar]);
      }
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  }
  const id = run('podman', ['image', 'inspect', '--format', '{{.Id}}', image]).trim();
  const product = join(IMAGE_CACHE, `product-${id.slice(0, 16)}.tar`);
  if (!existsSync(product)) {
    for (const f of readdirSync(IMAGE_CACHE))
      if (f.startsWith('product-')) rmSync(join(IMAGE_CACHE, f), { force: true });
    run('podman', ['save', '-q', '--format', 'docker-archive', '-o', `${product}.tmp`, image], { timeoutMs: 300_000 });
    run('mv', [`${product}.tmp`, product]);
  }
  return [pause, busybox, product];
}

function kubeconfigText(server: string, ca: string, name: string, token: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    `clusters: [{name: cbk8s, cluster: {server: "${server}", certificate-authority: ${ca}}}]`,
    `users: [{name: ${name}, user: {token: ${token}}}]`,
    `contexts: [{name: cbk8s, context: {cluster: cbk8s, user: ${name}}}]`,
    'current-context: cbk8s',
    '',
  ].join('\n');
}

function tail(file: string, lines = 30): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function alive(p: ChildProcess): boolean {
  return p.exitCode === null && p.signalCode === null;
}

function killPid(pid: number, signal: NodeJS.Signals = 'SIGTERM'): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

/** Starts the cluster with `nodeCount` nodes; `images` are docker-archives imported into each node's containerd. */
export async function startKubeCluster(images: string[], nodeCount = 2): Promise<KubeCluster> {
  for (const b of [
    'etcd',
    'kube-apiserver',
    'kube-controller-manager',
    'kube-scheduler',
    'kubelet',
    'kube-proxy',
    'kubectl',
  ])
    binary(b);
  const dir = mkdtempSync(join(tmpdir(), 'cbk8s-'));
  const tag = `cbk8s-${process.pid}`;
  const children: ChildProcess[] = [];
  const namespaces: Netns[] = [];
  const nodes: KubeNode[] = [];
  const insides: ChildProcess[] = [];
  const cgroupRoots: string[] = [];
  let etcdData: string | undefined;
  let dns: DnsServer | undefined;
  let stopped = false;

  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    // Read before anything stops: a node script exits once its daemons have, and its mount namespace is how its shims are found.
    const mountNamespaces = mountNamespacesOf(insides);
    for (const node of nodes) {
      for (const n of ['kubelet', 'kube-proxy']) {
        const pid = Number(tryRead(join(node.dir, 'pids', n)));
        if (pid) killPid(pid);
      }
    }
    await sleep(500);
    for (const node of nodes) {
      const sock = join(node.dir, 'containerd/containerd.sock');
      if (!existsSync(sock)) continue;
      const ctr = (...a: string[]) =>
        spawnSync('ctr', ['--address', sock, '-n', 'k8s.io', ...a], { encoding: 'utf8', timeout: 20_000 });
      const tasks = ctr('tasks', 'ls', '-q').stdout?.split('\n').filter(Boolean) ?? [];
      for (const t of tasks) ctr('tasks', 'kill', '-s', 'SIGKILL', t);
    }
    // The shims are daemonised (re-parented to PID 1): they are the processes left in a node's mount namespace.
    const leftovers = (): number[] => [...pidsInMountNamespaces(mountNamespaces), ...pidsInCgroups(cgroupRoots)];
    for (const node of nodes) {
      const pid = Number(tryRead(join(node.dir, 'pids', 'containerd')));
      if (pid) killPid(pid);
    }
    for (const c of children) if (alive(c)) c.kill('SIGTERM');
    await sleep(1000);
    for (let i = 0; i < 20; i++) {
      const left = leftovers().filter((p) => !insides.some((c) => c.pid === p));
      if (left.length === 0) break;
      for (const p of left) killPid(p, 'SIGKILL');
      await sleep(250);
    }
    for (const c of [...children, ...insides]) if (alive(c)) c.kill('SIGKILL');
    await sleep(250);
    for (const root of cgroupRoots) {
      for (const h of readdirSync('/sys/fs/cgroup')) {
        const top = join('/sys/fs/cgroup', h, root);
        if (existsSync(top)) spawnSync('find', [top, '-depth', '-type', 'd', '-exec', 'rmdir', '{}', ';']);
      }
    }
    dns?.stop();
    for (const ns of namespaces) ns.delete();
    if (etcdData) rmSync(etcdData, { recursive: true, force: true });
    if (!process.env.CBK_KEEP) rmSync(dir, { recursive: true, force: true });
  };

  try {
    const lb = Netns.create('cbk8s-');
    namespaces.push(lb);
    lb.sh(`ip addr add ${CLUSTER.vip}/32 dev lo && ip addr add ${CLUSTER.dns}/32 dev lo
           sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0`);
    for (let i = 1; i <= nodeCount; i++) {
      const netns = Netns.create('cbk8s-');
      namespaces.push(netns);
      const node: KubeNode = {
        name: `cbk8s-node${i}`,
        ip: `10.0.${i}.2`,
        podCidr: `10.244.${i}.0/24`,
        netns,
        dir: join(dir, `node${i}`),
      };
      nodes.push(node);
      vethPair(netns, 'eth0', lb, `n${i}`);
      // rp_filter off: a looped packet comes back on the uplink with this node's own pod address as its source.
      netns.sh(`ip addr add ${node.ip}/24 dev eth0 && ip route add default via 10.0.${i}.1
                sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 net.ipv4.conf.eth0.rp_filter=0`);
      lb.sh(`ip addr add 10.0.${i}.1/24 dev n${i} && ip route add ${node.podCidr} via ${node.ip}`);
    }
    // The VIP's port is NATed by setLoadBalancer; the VIP itself is on the LB's loopback so that nothing else answers for it.
    dns = await startDns(lb, CLUSTER.dns, {});
    lb.run('iptables', '-t', 'nat', '-N', 'CBK8S-LB');
    lb.run('iptables', '-t', 'nat', '-A', 'PREROUTING', '-d', CLUSTER.vip, '-j', 'CBK8S-LB');

    const pki = join(dir, 'pki');
    mkdirSync(pki);
    const apiIp = nodes[0]!.ip;
    makeApiServerCerts(pki, 'cbk8s-ca', [
      `IP:${apiIp}`,
      'IP:127.0.0.1',
      'IP:10.96.0.1',
      'DNS:localhost',
      'DNS:kubernetes',
      'DNS:kubernetes.default',
      'DNS:kubernetes.default.svc',
      'DNS:kubernetes.default.svc.cluster.local',
    ]);
    // The API server's client certificate towards the kubelets (exec, logs, /proxy), authorised by their webhook.
    openssl(
      pki,
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      'kubelet-client.key',
      '-out',
      'kubelet-client.csr',
      '-subj',
      '/O=system:masters/CN=kube-apiserver-kubelet-client',
    );
    openssl(
      pki,
      'x509',
      '-req',
      '-in',
      'kubelet-client.csr',
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      'kubelet-client.crt',
      '-days',
      '2',
    );
    openssl(pki, 'genrsa', '-out', 'sa.key', '2048');
    openssl(pki, 'rsa', '-in', 'sa.key', '-pubout', '-out', 'sa.pub');
    const ca = join(pki, 'ca.crt');
    const server = `https://${apiIp}:6443`;
    const token = () => `cbk8s-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
    const tokens = new Map<string, string>();
    const lines: string[] = [];
    const identities: [string, string, string][] = [
      ...Object.entries(USERS).map(([id, [user, group]]): [string, string, string] => [id, user, group]),
      ...nodes.map((n): [string, string, string] => [n.name, `system:node:${n.name}`, 'system:nodes']),
    ];
    for (const [id, user, group] of identities) {
      const t = token();
      tokens.set(id, t);
      lines.push(`${t},${user},uid-${id},"${group || 'system:authenticated'}"`);
      writeFileSync(join(dir, `${id}.kubeconfig`), kubeconfigText(server, ca, id, t));
    }
    writeFileSync(join(pki, 'tokens.csv'), `${lines.join('\n')}\n`);

    const cpNs = nodes[0]!.netns;
    const logs = join(dir, 'logs');
    mkdirSync(logs);
    const startIn = (ns: Netns, name: string, bin: string, args: string[]): ChildProcess => {
      const fd = openSync(join(logs, `${name}.log`), 'a');
      // nsenter execs the daemon: the child's PID is the daemon's.
      const p = spawn('nsenter', [`--net=${ns.path}`, bin, ...args], { stdio: ['ignore', fd, fd] });
      closeSync(fd);
      children.push(p);
      return p;
    };
    etcdData = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : dir, 'cbk8s-etcd-'));
    const features = 'BoundServiceAccountTokenVolume=true';
    startIn(cpNs, 'etcd', binary('etcd'), [
      '--name',
      'cbk8s',
      '--data-dir',
      etcdData,
      '--log-level',
      'warn',
      '--listen-client-urls',
      'http://127.0.0.1:2379',
      '--advertise-client-urls',
      'http://127.0.0.1:2379',
      '--listen-peer-urls',
      'http://127.0.0.1:2380',
      '--initial-advertise-peer-urls',
      'http://127.0.0.1:2380',
      '--initial-cluster',
      'cbk8s=http://127.0.0.1:2380',
    ]);
    const apiserver = startIn(cpNs, 'kube-apiserver', binary('kube-apiserver'), [
      '--etcd-servers=http://127.0.0.1:2379',
      '--bind-address=0.0.0.0',
      '--secure-port=6443',
      `--advertise-address=${apiIp}`,
      `--tls-cert-file=${pki}/apiserver.crt`,
      `--tls-private-key-file=${pki}/apiserver.key`,
      `--client-ca-file=${ca}`,
      `--token-auth-file=${pki}/tokens.csv`,
      '--authorization-mode=Node,RBAC',
      '--enable-admission-plugins=NodeRestriction',
      `--service-account-key-file=${pki}/sa.pub`,
      `--service-account-signing-key-file=${pki}/sa.key`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      '--api-audiences=https://kubernetes.default.svc.cluster.local',
      `--service-cluster-ip-range=${CLUSTER.serviceCidr}`,
      '--allow-privileged=true',
      `--kubelet-client-certificate=${pki}/kubelet-client.crt`,
      `--kubelet-client-key=${pki}/kubelet-client.key`,
      '--kubelet-preferred-address-types=InternalIP',
      `--feature-gates=${features}`,
      `--cert-dir=${pki}/apiserver-certs`,
      '--profiling=false',
      '--v=1',
    ]);

    // The nodes start while the API server comes up: containerd and the image imports take the longest.
    for (const node of nodes) {
      const s = node.dir;
      for (const d of [
        'containerd',
        'kubelet',
        'kubelet-pki',
        'kubelet-plugins',
        'log',
        'sysctl',
        'pids',
        'logs',
        'cni',
      ])
        mkdirSync(join(s, d), { recursive: true });
      const cgroupRoot = `${tag}-${node.name.slice(-5)}`;
      cgroupRoots.push(cgroupRoot);
      // runc with the cgroupfs driver under a root of this node's own, in every v1 hierarchy (this host is hybrid).
      for (const h of readdirSync('/sys/fs/cgroup')) {
        if (h === 'unified' || !existsSync(join('/sys/fs/cgroup', h, 'cgroup.procs'))) continue;
        mkdirSync(join('/sys/fs/cgroup', h, cgroupRoot), { recursive: true });
      }
      if (existsSync('/sys/fs/cgroup/cpuset/cgroup.procs')) {
        for (const f of ['cpuset.cpus', 'cpuset.mems'])
          writeFileSync(join('/sys/fs/cgroup/cpuset', cgroupRoot, f), readFileSync(join('/sys/fs/cgroup/cpuset', f)));
      }
      writeFileSync(
        join(s, 'cni/10-cbk8s.conflist'),
        JSON.stringify({
          cniVersion: '0.4.0',
          name: 'cbk8s',
          plugins: [
            {
              type: 'bridge',
              bridge: 'cni0',
              isGateway: true,
              ipMasq: false,
              hairpinMode: true,
              ipam: {
                type: 'host-local',
                dataDir: '/run/cbk8s-ipam',
                ranges: [[{ subnet: node.podCidr }]],
                routes: [{ dst: '0.0.0.0/0' }],
              },
            },
            { type: 'portmap', capabilities: { portMappings: true } },
          ],
        }),
      );
      writeFileSync(
        join(s, 'containerd.toml'),
        `version = 2
root = "${s}/containerd/root"
state = "${s}/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "${s}/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  disable_apparmor = true
  # Where root lacks CAP_SYS_RESOURCE, runc cannot lower oom_score_adj (the kubelet asks -998 for sandboxes).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${s}/cni"
`,
      );
      writeFileSync(
        join(s, 'kubelet.yaml'),
        `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: ${ca}}}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /${cgroupRoot}
cgroupsPerQOS: true
clusterDNS: [${CLUSTER.dns}]
clusterDomain: cluster.local
resolvConf: ${s}/resolv.conf
failSwapOn: false
# The disk is the host's: no evictions, no image GC of the imported images.
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`,
      );
      writeFileSync(join(s, 'resolv.conf'), `nameserver ${CLUSTER.dns}\noptions timeout:1 attempts:2\n`);
      for (const [f, v] of Object.entries({
        overcommit_memory: 1,
        panic_on_oom: 0,
        panic: 10,
        panic_on_oops: 1,
        root_maxkeys: 1000000,
        root_maxbytes: 25000000,
      })) {
        writeFileSync(join(s, 'sysctl', f), String(v));
      }
      writeFileSync(join(s, 'kubelet.kubeconfig'), kubeconfigText(server, ca, node.name, tokens.get(node.name)!));
      writeFileSync(join(s, 'proxy.kubeconfig'), kubeconfigText(server, ca, 'proxy', tokens.get('proxy')!));
      const fd = openSync(join(s, 'logs', 'inside.log'), 'a');
      const inside = spawn(
        'nsenter',
        [`--net=${node.netns.path}`, 'unshare', '-m', '--propagation', 'private', 'bash', INSIDE],
        {
          stdio: ['ignore', fd, fd],
          env: {
            ...process.env,
            S: s,
            NODE: node.name,
            NODE_IP: node.ip,
            CLUSTER_CIDR: CLUSTER.clusterCidr,
            KUBE_BIN,
            IMAGES: images.join(' '),
          },
        },
      );
      closeSync(fd);
      insides.push(inside);
    }

    const kubectlResult = (args: string[], opts: { user?: ClusterUser; input?: string; timeoutMs?: number } = {}) => {
      const r = spawnSync(
        'nsenter',
        [
          `--net=${cpNs.path}`,
          binary('kubectl'),
          '--kubeconfig',
          join(dir, `${opts.user ?? 'admin'}.kubeconfig`),
          '--cache-dir',
          join(dir, 'kubectl-cache'),
          ...args,
        ],
        { encoding: 'utf8', input: opts.input, timeout: opts.timeoutMs ?? 120_000, maxBuffer: 64 * 1024 * 1024 },
      );
      return { status: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
    };
    const kubectl = (args: string[], opts: { user?: ClusterUser; input?: string; timeoutMs?: number } = {}): string => {
      const r = kubectlResult(args, opts);
      if (r.status !== 0) throw new Error(`kubectl ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
      return r.stdout;
    };
    await until(
      'kube-apiserver /readyz',
      120_000,
      () => {
        if (!alive(apiserver)) throw new Error(`kube-apiserver exited:\n${tail(join(logs, 'kube-apiserver.log'))}`);
        return kubectlResult(['get', '--raw', '/readyz'], { timeoutMs: 10_000 }).stdout.trim() === 'ok'
          ? true
          : undefined;
      },
      500,
    );
    startIn(cpNs, 'kube-controller-manager', binary('kube-controller-manager'), [
      `--kubeconfig=${join(dir, 'cm.kubeconfig')}`,
      '--leader-elect=false',
      '--port=0',
      '--secure-port=0',
      '--use-service-account-credentials=true',
      `--service-account-private-key-file=${pki}/sa.key`,
      `--root-ca-file=${ca}`,
      `--service-cluster-ip-range=${CLUSTER.serviceCidr}`,
      `--flex-volume-plugin-dir=${join(dir, 'flex')}`,
      `--feature-gates=${features}`,
      '--v=1',
    ]);
    startIn(cpNs, 'kube-scheduler', binary('kube-scheduler'), [
      `--kubeconfig=${join(dir, 'sched.kubeconfig')}`,
      '--leader-elect=false',
      '--port=0',
      '--secure-port=0',
      '--v=1',
    ]);

    // Each node's pod CIDR is fixed by its CNI config; the Node object says the same (set once, by the admin).
    for (const node of nodes) {
      await until(
        `node ${node.name} registered`,
        180_000,
        () => {
          const inside = insides[nodes.indexOf(node)]!;
          if (!alive(inside))
            throw new Error(
              `${node.name} stopped:\n${tail(join(node.dir, 'logs/inside.log'))}\n${tail(join(node.dir, 'logs/kubelet.log'))}`,
            );
          return kubectlResult(['get', 'node', node.name, '-o', 'name']).status === 0 ? true : undefined;
        },
        500,
      );
      kubectl([
        'patch',
        'node',
        node.name,
        '-p',
        JSON.stringify({ spec: { podCIDR: node.podCidr, podCIDRs: [node.podCidr] } }),
      ]);
    }
    for (const node of nodes) {
      await until(
        `node ${node.name} Ready`,
        180_000,
        () => {
          const ready = kubectlResult([
            'get',
            'node',
            node.name,
            '-o',
            'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
          ]).stdout;
          return ready === 'True' ? true : undefined;
        },
        500,
      );
    }

    return {
      nodes,
      lb,
      dir,
      kubectl,
      kubectlResult,
      kubeconfig: (user) => join(dir, `${user}.kubeconfig`),
      setLoadBalancer(hostname, port, node, nodePort) {
        lb.run('iptables', '-t', 'nat', '-F', 'CBK8S-LB');
        lb.run(
          'iptables',
          '-t',
          'nat',
          '-A',
          'CBK8S-LB',
          '-p',
          'tcp',
          '--dport',
          String(port),
          '-j',
          'DNAT',
          '--to-destination',
          `${node.ip}:${nodePort}`,
        );
        dns!.setZone({ [hostname]: { A: [[CLUSTER.vip, 30]] } });
      },
      pids: () => [
        ...children.filter(alive).map((c) => c.pid!),
        ...pidsInMountNamespaces(mountNamespacesOf(insides)),
        ...pidsInCgroups(cgroupRoots),
      ],
      stop,
    };
  } catch (e) {
    const detail = nodes
      .map(
        (n) =>
          `--- ${n.name} kubelet:\n${tail(join(n.dir, 'logs/kubelet.log'), 15)}\n--- inside:\n${tail(join(n.dir, 'logs/inside.log'), 10)}`,
      )
      .join('\n');
    await stop();
    throw new Error(`${e instanceof Error ? e.message : String(e)}\n${detail}`);
  }
}

function tryRead(file: string): string {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    return '';
  }
}

/** Every process in one of the nodes' mount namespaces (the node scripts, their daemons and the re-parented shims). */
function pidsInMountNamespaces(mine: Set<string>): number[] {
  if (mine.size === 0) return [];
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => mine.has(tryReadlink(`/proc/${p}/ns/mnt`)))
    .map(Number);
}

function mountNamespacesOf(insides: ChildProcess[]): Set<string> {
  return new Set(
    insides
      .filter(alive)
      .map((c) => tryReadlink(`/proc/${c.pid}/ns/mnt`))
      .filter(Boolean),
  );
}

function pidsInCgroups(roots: string[]): number[] {
  const out = new Set<number>();
  for (const root of roots) {
    const r = spawnSync('find', [join('/sys/fs/cgroup/memory', root), '-name', 'cgroup.procs'], { encoding: 'utf8' });
    for (const f of (r.stdout ?? '').split('\n').filter(Boolean))
      for (const p of tryRead(f).split('\n').filter(Boolean)) out.add(Number(p));
  }
  return [...out];
}

function tryReadlink(path: string): string {
  try {
    return readlinkSync(path);
  } catch {
    return '';
  }
}
