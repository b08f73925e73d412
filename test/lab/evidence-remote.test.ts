// `clbprobe evidence` end to end on the real kernel, locally and --all-nodes.
// Two namespace labs (src/demo/lab.ts): node-a's Service traffic loops
// (ETP=Local), node-b's is protected by SNAT (ETP=Cluster); the agent as
// shipped runs in each lab's node namespace. A fake API server
// (test/support/fake-apiserver.ts) lists four agent pods: node-a and node-b
// answer through a real WebSocket exec that runs the pod's
// `node /app/dist/bundle/main.js evidence ...` (the image's Node, the shipped bundle)
// inside that node's namespace against its agent's socket; node-c's exec is forbidden (RBAC); node-d's
// pod is Pending. The workstation command is the compiled CLI with a
// kubeconfig pointing at the fake. Namespaces are cbr-*.
// The default transport, the evidence relay: `clbprobe evidence-relay` as deploy/evidence-relay.yaml
// runs it (the image's ENTRYPOINT and Node, the manifest's args)
// (no namespace, no capabilities) behind the fake's service proxy; it reaches node-a's and
// node-b's agents at their pod IPs (127.0.83.2/3 on loopback, relayed through a Unix socket
// into each node's namespace); node-c's IP has no agent. Agents and relay check tokens with
// the fake's TokenReview/SubjectAccessReview, reached from each namespace through a relay; the
// relay asks the agents with its own service account's per-node tokens (the fake's TokenRequest,
// with deploy/evidence-relay.yaml's Role), naming the on-call user.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { evidenceAudience, ON_BEHALF_OF_HEADER } from '../../src/agent/evidence-http.js';
import { AGENT_ENTRYPOINT } from '../../src/cli/evidence-remote.js';
import { clusterList, createLoopLab, type Etp, LAB, type LoopLab } from '../../src/demo/lab.js';
import {
  containerEnv,
  EVIDENCE_RELAY_PATH,
  hostArgv,
  inCheckout,
  nodeCommand,
  podContainer,
} from '../support/daemonset.js';
import type { Rule } from '../support/fake-access.js';
import { FakeApiServer } from '../support/fake-apiserver.js';
import { imageNode } from '../support/image-node.js';
import { isRoot } from '../support/netns.js';
import { type Relay, relay } from '../support/relay.js';
import { CLI, jsonLines, requireBuiltCli } from '../support/run-cli.js';
import { shippedAgent } from '../support/shipped-agent.js';
import { sleep, until } from '../support/wait.js';

const PREFIX = 'cbr-';
const AGENT_LABELS = { 'app.kubernetes.io/name': 'clbprobe' };
/** The relay's service account (its --service-account default, deploy/evidence-relay.yaml's ServiceAccount). */
const RELAY_SA = { namespace: 'clbprobe', name: 'clbprobe-evidence-relay' };

/** deploy/evidence-relay.yaml's Role rules, as shipped. */
function relayRoleRules(): Rule[] {
  const docs = parseAllDocuments(readFileSync(EVIDENCE_RELAY_PATH, 'utf8')).map(
    (d) => d.toJS() as { kind?: string; metadata?: { name?: string }; rules?: Rule[] } | null,
  );
  const role = docs.find((d) => d?.kind === 'Role' && d.metadata?.name === RELAY_SA.name);
  if (!role?.rules) throw new Error(`${EVIDENCE_RELAY_PATH}: no Role ${RELAY_SA.name} with rules`);
  return role.rules;
}

interface Node {
  name: string;
  pod: string;
  lab: LoopLab;
  socket: string;
  agent?: ChildProcess;
  /** The agent container's env on this node (the manifest's, NODE_NAME included): what an exec into it gets. */
  env?: NodeJS.ProcessEnv;
  stderr: string;
}

/** The lab's cluster file with its node renamed (Node object and endpoint nodeName), so each agent is a different node. */
function writeClusterFile(dir: string, etp: Etp, node: string): string {
  const list = clusterList(etp) as {
    items: { kind: string; metadata: { name: string }; endpoints?: { nodeName: string }[] }[];
  };
  for (const item of list.items) {
    if (item.kind === 'Node') item.metadata.name = node;
    for (const ep of item.endpoints ?? []) ep.nodeName = node;
  }
  const path = join(dir, `${node}.json`);
  writeFileSync(path, JSON.stringify(list));
  return path;
}

const POD_IPS: Record<string, string> = { 'node-a': '127.0.83.2', 'node-b': '127.0.83.3', 'node-c': '127.0.83.4' };

function agentPod(name: string, node: string, phase: string) {
  return {
    metadata: { name, namespace: 'clbprobe', labels: AGENT_LABELS },
    spec: { nodeName: node, containers: [{ name: 'agent', image: 'clbprobe:0.1.0' }] },
    status: {
      phase,
      ...(POD_IPS[node] && phase === 'Running' ? { podIP: POD_IPS[node] } : {}),
      containerStatuses: [
        { name: 'agent', ready: phase === 'Running', restartCount: 0, image: '', imageID: '', state: {} },
      ],
    },
  };
}

/** The summary line of an --all-nodes --json run in which node-a and node-b answered and node-c and node-d failed. */
function expectSummaryAandB(lines: Line[]): void {
  const entries = (node: string) => lines.filter((l) => l.node === node && l.type === 'entry');
  const summary = lines.at(-1) as unknown as {
    type: string;
    answered: number;
    failed: number;
    nodes: { node: string; status: string; entries: number }[];
  };
  expect(summary).toMatchObject({ type: 'summary', answered: 2, failed: 2 });
  expect(summary.nodes.map((n) => [n.node, n.status, n.entries])).toEqual([
    ['node-a', 'ok', entries('node-a').length],
    ['node-b', 'ok', entries('node-b').length],
    ['node-c', 'failed', 0],
    ['node-d', 'failed', 0],
  ]);
}

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Each stdout line with the time it arrived (ms since start). */
  lines: { at: number; text: string }[];
  exitAt: number;
}

/** Runs the compiled CLI without blocking (spawnSync would starve the fake API server); onLine sees lines as they come. */
function cli(args: string[], opts: { netns?: string; onLine?: (text: string) => void } = {}): Promise<CliRun> {
  const t0 = performance.now();
  const argv = opts.netns
    ? ['ip', ['netns', 'exec', opts.netns, process.execPath, CLI, ...args]]
    : [process.execPath, [CLI, ...args]];
  const p = spawn(argv[0] as string, argv[1] as string[], { stdio: ['ignore', 'pipe', 'pipe'] });
  const r: CliRun = { code: null, stdout: '', stderr: '', lines: [], exitAt: 0 };
  let partial = '';
  p.stdout!.on('data', (b: Buffer) => {
    r.stdout += b.toString();
    const parts = (partial + b.toString()).split('\n');
    partial = parts.pop()!;
    for (const text of parts) {
      r.lines.push({ at: performance.now() - t0, text });
      opts.onLine?.(text);
    }
  });
  p.stderr!.on('data', (b: Buffer) => (r.stderr += b.toString()));
  return new Promise((resolve) =>
    p.on('close', (code) => {
      r.code = code;
      r.exitAt = performance.now() - t0;
      resolve(r);
    }),
  );
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

type Line = {
  node: string;
  pod?: string;
  type: string;
  class?: string;
  line?: string;
  live?: boolean;
  message?: string;
  entries?: number;
};

describe.skipIf(!isRoot)(
  'clbprobe evidence against real agents (local, and --all-nodes through a fake API server)',
  () => {
    let dir: string;
    let kubeconfig: string;
    const api = new FakeApiServer();
    const nodes: Node[] = [];
    const execProcs: ChildProcess[] = [];
    const relays: Relay[] = [];
    let relayProc: ChildProcess | undefined;
    let relayStderr = '';
    /** Kubeconfigs of on-call users: alice may read lab/web, bob may not; carol may not use the relay. */
    const users: Record<string, string> = {};

    beforeAll(async () => {
      requireBuiltCli();
      dir = mkdtempSync(join(tmpdir(), 'cbr-evidence-'));
      try {
        const [loop, safe] = await Promise.all([createLoopLab('Local', PREFIX), createLoopLab('Cluster', PREFIX)]);
        nodes.push(
          { name: 'node-a', pod: 'clbprobe-aaaaa', lab: loop, socket: join(dir, 'a.sock'), stderr: '' },
          { name: 'node-b', pod: 'clbprobe-bbbbb', lab: safe, socket: join(dir, 'b.sock'), stderr: '' },
        );
        await api.start();
        // The API server as each node's namespace sees it: 127.0.0.1:16443 there, relayed to this process.
        const apiSock = join(dir, 'api.sock');
        relays.push(await relay(undefined, { path: apiSock }, { port: Number(new URL(api.url).port) }));
        const nsKubeconfig = join(dir, 'ns-kubeconfig');
        writeFileSync(nsKubeconfig, api.kubeconfig().replace(api.url, 'http://127.0.0.1:16443'));
        for (const n of nodes) {
          relays.push(await relay(n.lab.node.name, { port: 16443 }, { path: apiSock }));
          // The agent's pod IP on this side: loopback, relayed into the node's namespace.
          const agentSock = join(dir, `${n.name}-agent.sock`);
          relays.push(await relay(n.lab.node.name, { path: agentSock }, { port: 9811 }));
          relays.push(await relay(undefined, { host: POD_IPS[n.name]!, port: 9811 }, { path: agentSock }));
          // The agent as shipped (the image's Node, the DaemonSet's node flags, env and bundle).
          const shipped = shippedAgent(
            [
              '--cluster-file',
              writeClusterFile(dir, n.lab.etp, n.name),
              '--node-name',
              n.name,
              '--listen',
              '127.0.0.1:9811',
              '--interface',
              'eth0',
              '--capture',
              'off',
              '--evidence-socket',
              n.socket,
              '--log-level',
              'warn',
              '--kubeconfig',
              nsKubeconfig,
            ],
            n.name,
          );
          n.env = shipped.env;
          n.agent = spawn('ip', ['netns', 'exec', n.lab.node.name, shipped.node, ...shipped.argv], {
            env: n.env,
            stdio: ['ignore', 'ignore', 'pipe'],
          });
          n.agent.stderr!.on('data', (b: Buffer) => (n.stderr += b.toString()));
        }
        kubeconfig = join(dir, 'kubeconfig');
        writeFileSync(kubeconfig, api.kubeconfig());
        for (const n of nodes) api.apply('pods', agentPod(n.pod, n.name, 'Running'));
        api.apply('pods', agentPod('clbprobe-ccccc', 'node-c', 'Running'));
        api.apply('pods', agentPod('clbprobe-ddddd', 'node-d', 'Pending'));
        api.apply('pods', {
          ...agentPod('prometheus-0', 'node-a', 'Running'),
          metadata: { name: 'prometheus-0', namespace: 'clbprobe', labels: { app: 'prometheus' } },
        });
        api.forbidExec('clbprobe', 'clbprobe-ccccc');
        // The relay, as deploy/evidence-relay.yaml runs it, behind the Service the CLI names.
        const relayPort = await freePort();
        // Its container's command line as shipped (the image's ENTRYPOINT and the manifest's args) on
        // the image's Node; the test's --listen (a later one wins), kubeconfig and log level follow.
        const relayContainer = podContainer('relay', EVIDENCE_RELAY_PATH, 'Deployment');
        const relayCmd = nodeCommand(hostArgv(relayContainer));
        relayProc = spawn(
          imageNode(),
          [
            ...relayCmd.nodeFlags,
            relayCmd.script,
            ...relayCmd.scriptArgs,
            '--listen',
            `127.0.0.1:${relayPort}`,
            '--kubeconfig',
            kubeconfig,
            '--log-level',
            'warn',
          ],
          { env: { ...process.env, ...containerEnv(relayContainer, {}) }, stdio: ['ignore', 'ignore', 'pipe'] },
        );
        relayProc.stderr!.on('data', (b: Buffer) => (relayStderr += b.toString()));
        // The relay's own account and its Role, bound here to the relay's identity (tester: the fake lists pods only for fake-token).
        api.access.addServiceAccount(RELAY_SA.namespace, RELAY_SA.name);
        for (const rule of relayRoleRules())
          api.access.grant({
            subject: { user: 'tester' },
            namespace: RELAY_SA.namespace,
            binding: RELAY_SA.name,
            rule,
          });
        api.apply('services', {
          metadata: { name: 'clbprobe-evidence', namespace: 'clbprobe' },
          spec: { type: 'ClusterIP', ports: [{ port: 80, targetPort: 9812 }] },
        });
        api.onServiceProxy = (ns, name) =>
          ns === 'clbprobe' && name === 'clbprobe-evidence' ? { port: relayPort } : undefined;
        // deploy/oncall-rbac.yaml for group oncall; alice may also read the Service (a RoleBinding in lab).
        api.access.grant({
          subject: { group: 'oncall' },
          namespace: 'clbprobe',
          rule: {
            verbs: ['get'],
            apiGroups: [''],
            resources: ['services/proxy'],
            resourceNames: ['clbprobe-evidence'],
          },
        });
        api.access.grant({
          subject: { user: 'alice' },
          namespace: 'lab',
          rule: { verbs: ['get', 'list'], apiGroups: [''], resources: ['services'] },
        });
        for (const [user, groups] of [
          ['alice', ['oncall']],
          ['bob', ['oncall']],
          ['carol', ['developers']],
        ] as const) {
          api.access.addToken(`${user}-token`, { username: user, groups: [...groups] });
          users[user] = join(dir, `${user}.kubeconfig`);
          writeFileSync(users[user], api.kubeconfig(`${user}-token`));
        }
        // What the kubelet would do in the agent container: run the exec'd command with the
        // container's env, here the image's Node and the shipped bundle (the command's /app is this
        // checkout) in that node's namespace, pointed at that node's agent socket. Other commands
        // (copying a capture out of the pod's /tmp) run as they are, in the same namespace.
        api.onExec = (call) => {
          const n = nodes.find((x) => x.pod === call.pod);
          const prefix = [...AGENT_ENTRYPOINT, 'evidence'];
          const stdio: ['ignore', 'pipe', 'pipe'] = ['ignore', 'pipe', 'pipe'];
          const p = !n
            ? spawn('sh', ['-c', `echo 'unexpected exec ${call.pod}: ${call.command.join(' ')}' >&2; exit 127`], {
                stdio,
              })
            : call.command.slice(0, prefix.length).join(' ') === prefix.join(' ')
              ? spawn(
                  'ip',
                  [
                    'netns',
                    'exec',
                    n.lab.node.name,
                    imageNode(),
                    ...inCheckout(call.command.slice(1)),
                    '--socket',
                    n.socket,
                  ],
                  { stdio, env: n.env },
                )
              : spawn('ip', ['netns', 'exec', n.lab.node.name, ...call.command], { stdio });
          execProcs.push(p);
          return p;
        };
        for (const n of nodes) {
          await until(`agent ${n.name} ready (stderr: ${n.stderr})`, 20_000, () =>
            spawnSync('ip', ['netns', 'exec', n.lab.node.name, 'curl', '-sf', 'http://127.0.0.1:9811/readyz'], {
              encoding: 'utf8',
            }).stdout.startsWith('ready') && existsSync(n.socket)
              ? true
              : undefined,
          );
        }
        // One looping connection on node-a, one SNAT-protected on node-b.
        const [looped, protectedConnect] = await Promise.all([
          nodes[0]!.lab.connect(1500),
          nodes[1]!.lab.connect(3000),
        ]);
        expect(looped).toBe('timeout');
        expect(protectedConnect).toBe('connected node2');
      } catch (e) {
        await cleanup();
        throw e;
      }
    }, 90_000);

    async function cleanup(): Promise<void> {
      for (const p of execProcs) p.kill('SIGKILL');
      relayProc?.kill('SIGKILL');
      for (const r of relays) r.close();
      for (const n of nodes) {
        n.agent?.kill('SIGKILL');
        n.lab.destroy();
      }
      await api.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    }
    afterAll(cleanup);

    it('--all-nodes --json: the loop pair from node-a only, node-b healthy, node-c 403 naming the RBAC verb, node-d Pending; exit 1', async () => {
      const r = await cli([
        'evidence',
        '--all-nodes',
        '--via',
        'exec',
        '--service',
        'lab/web',
        '--json',
        '--kubeconfig',
        kubeconfig,
      ]);
      expect(r.code, r.stderr).toBe(1);
      const lines = jsonLines<Line>(r.stdout);
      const entries = (node: string) => lines.filter((l) => l.node === node && l.type === 'entry');
      const pairA = entries('node-a')
        .filter((l) => l.class === 'loopback_pair')
        .map((l) => l.line!);
      expect(pairA.some((l) => l.includes(`src=${LAB.clientPod} dst=${LAB.vip}`) && l.includes('[UNREPLIED]'))).toBe(
        true,
      );
      expect(
        pairA.some((l) => l.includes(`src=${LAB.clientPod} dst=${LAB.node1}`) && l.includes(`dport=${LAB.nodePort}`)),
      ).toBe(true);
      // node-b's pod→LB traffic is there (so its verdict is not vacuous) and none of it loops.
      expect(entries('node-b').some((l) => l.line!.includes(`dst=${LAB.vip}`))).toBe(true);
      expect(entries('node-b').filter((l) => l.class === 'loopback_pair')).toEqual([]);
      expect(lines.filter((l) => l.type === 'service').map((l) => [l.node, l.pod])).toEqual(
        expect.arrayContaining([
          ['node-a', 'clbprobe-aaaaa'],
          ['node-b', 'clbprobe-bbbbb'],
        ]),
      );
      const errors = Object.fromEntries(lines.filter((l) => l.type === 'error').map((l) => [l.node, l.message!]));
      expect(Object.keys(errors).sort()).toEqual(['node-c', 'node-d']);
      expect(errors['node-c']).toContain(
        '403 Forbidden: pods "clbprobe-ccccc" is forbidden: User "tester" cannot create resource "pods/exec"',
      );
      expect(errors['node-c']).toContain('needs RBAC verbs "get" and "create" on "pods/exec" in namespace clbprobe');
      expect(errors['node-d']).toBe('agent pod not running: phase Pending');
      expectSummaryAandB(lines);
      // Only the agent pods were asked, in their agent container, with the image's command.
      const asked = api.execs.filter((c) => c.pod !== 'clbprobe-ccccc');
      expect(asked.map((c) => c.pod).sort()).toEqual(['clbprobe-aaaaa', 'clbprobe-bbbbb']);
      for (const c of asked) {
        expect(c.container).toBe('agent');
        expect(c.command).toEqual([...AGENT_ENTRYPOINT, 'evidence', '--service', 'lab/web', '--json']);
      }
    });

    it('--all-nodes text: the local text with a node column and a summary; --node limits the nodes (exit 0)', async () => {
      const all = await cli([
        'evidence',
        '--all-nodes',
        '--via',
        'exec',
        '--service',
        'lab/web',
        '--kubeconfig',
        kubeconfig,
      ]);
      expect(all.code).toBe(1);
      const out = all.stdout.split('\n');
      expect(out).toContain(
        `node-a  # lab/web on node-a: VIPs ${LAB.vip}; ports 80/TCP (NodePort ${LAB.nodePort}); endpoints ${LAB.serverPod}:${LAB.serverPort}`,
      );
      expect(out.some((l) => /^node-a {2}\S+Z loopback_pair +now {2}tcp .*\[UNREPLIED\]/.test(l))).toBe(true);
      expect(out.some((l) => /^node-b {2}\S+Z loopback_pair/.test(l))).toBe(false);
      expect(out.some((l) => l.startsWith('node-c  # error: 403 Forbidden'))).toBe(true);
      expect(out).toContain('# summary: 2 of 4 nodes answered');
      expect(
        out.some((l) => /^# node-d {2}clbprobe-ddddd +failed: agent pod not running: phase Pending$/.test(l)),
      ).toBe(true);

      const one = await cli([
        'evidence',
        '--all-nodes',
        '--via',
        'exec',
        '--service',
        'lab/web',
        '--kubeconfig',
        kubeconfig,
        '--node',
        'node-a',
      ]);
      expect(one.code, one.stderr).toBe(0);
      expect(one.stdout).not.toMatch(/^node-[bcd]/m);
      expect(one.stdout).toContain('# summary: 1 of 1 nodes answered');
    });

    it('--all-nodes --watch streams new entries from the node as they happen, before the watch ends', async () => {
      let connect: Promise<string> | undefined;
      const r = await cli(
        [
          'evidence',
          '--all-nodes',
          '--via',
          'exec',
          '--service',
          'lab/web',
          '--json',
          '--kubeconfig',
          kubeconfig,
          '--node',
          'node-a',
          '--watch',
          '4s',
        ],
        {
          onLine: (text) => {
            if (!connect && text.includes('"type":"service"')) connect = nodes[0]!.lab.connect(1000);
          },
        },
      );
      expect(await connect).toBe('timeout');
      expect(r.code, r.stderr).toBe(0);
      const live = r.lines
        .filter((l) => l.text.includes('"live":true'))
        .map((l) => ({ at: l.at, line: JSON.parse(l.text) as Line }));
      expect(live.length).toBeGreaterThan(0);
      expect(live.every((l) => l.line.node === 'node-a')).toBe(true);
      expect(live.some((l) => l.line.class === 'loopback_pair')).toBe(true);
      // Streamed: the first new entry arrived well before the command ended (the watch is 4 s).
      expect(r.exitAt - live[0]!.at).toBeGreaterThan(1500);
    });

    it('--all-nodes --pcap: one capture per node, copied out of the pod through exec, read back by tcpdump', async () => {
      const base = join(dir, 'all.pcap');
      let connects: Promise<string[]> | undefined;
      const started = new Set<string>();
      const r = await cli(
        [
          'evidence',
          '--all-nodes',
          '--via',
          'exec',
          '--service',
          'lab/web',
          '--kubeconfig',
          kubeconfig,
          '--node',
          'node-a,node-b',
          '--watch',
          '3s',
          '--pcap',
          base,
          '--json',
        ],
        {
          onLine: (text) => {
            // A node's capture starts when its first line arrives; connect once both have.
            if (text.includes('"type":"service"')) started.add((JSON.parse(text) as Line).node);
            if (!connects && started.size === 2)
              connects = sleep(500).then(() => Promise.all(nodes.map((n) => n.lab.connect(1000))));
          },
        },
      );
      expect(r.code, r.stderr).toBe(0);
      expect(await connects).toEqual(['timeout', 'connected node2']);
      const summary = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as {
        nodes: { node: string; pcap: { file: string; packets: number; bytes: number } }[];
      };
      const tcpdump = (file: string) => {
        const read = spawnSync('tcpdump', ['-nr', file], { encoding: 'utf8' });
        expect(read.status, read.stderr).toBe(0);
        return read.stdout.trim().split('\n');
      };
      const [a, b] = summary.nodes;
      expect([a!.pcap.file, b!.pcap.file]).toEqual([join(dir, 'all.node-a.pcap'), join(dir, 'all.node-b.pcap')]);
      const pa = tcpdump(a!.pcap.file);
      const pb = tcpdump(b!.pcap.file);
      expect(pa).toHaveLength(a!.pcap.packets);
      expect(pb).toHaveLength(b!.pcap.packets);
      // node-a: the client's SYN to the LB and the same client back in at the NodePort (the loop);
      // node-b: its pod→LB traffic leaves SNATed to the node, and nothing comes back to its NodePort.
      expect(pa.some((l) => l.includes(`${LAB.clientPod}.`) && l.includes(`> ${LAB.vip}.${LAB.port}:`))).toBe(true);
      expect(pa.some((l) => l.includes(`${LAB.clientPod}.`) && l.includes(`> ${LAB.node1}.${LAB.nodePort}:`))).toBe(
        true,
      );
      expect(pb.some((l) => l.includes(`${LAB.node1}.`) && l.includes(`> ${LAB.vip}.${LAB.port}:`))).toBe(true);
      expect(pb.some((l) => l.includes(`> ${LAB.node1}.${LAB.nodePort}:`))).toBe(false);
      // The pods' scratch copies are gone.
      const remote = api.execs.flatMap((c) => c.command.filter((x) => x.startsWith('/tmp/clbprobe-evidence-')));
      expect(remote.length).toBeGreaterThanOrEqual(2);
      for (const f of remote) expect(existsSync(f)).toBe(false);
    });

    it('the API server refusing the pod list is a usage/API error (exit 2) naming the list verb', async () => {
      api.forbid('pods');
      try {
        const r = await cli([
          'evidence',
          '--all-nodes',
          '--via',
          'exec',
          '--service',
          'lab/web',
          '--kubeconfig',
          kubeconfig,
        ]);
        expect(r.code).toBe(2);
        expect(r.stderr).toMatch(
          /403 Forbidden: .*cannot list resource "pods".*needs RBAC verb "list" on "pods" in namespace clbprobe/,
        );
      } finally {
        api.forbid('pods', false);
      }
    });

    it('local evidence --pcap --watch: text output and a .pcap tcpdump reads back with the Service packets', async () => {
      const a = nodes[0]!;
      const pcap = join(dir, 'web.pcap');
      let connect: Promise<string> | undefined;
      const r = await cli(['evidence', '--service', 'lab/web', '--pcap', pcap, '--watch', '3s', '--socket', a.socket], {
        netns: a.lab.node.name,
        onLine: (text) => {
          // The capture starts when the agent's first line arrives; connect just after.
          if (!connect && text.startsWith('# lab/web')) connect = sleep(300).then(() => a.lab.connect(1000));
        },
      });
      expect(await connect).toBe('timeout');
      expect(r.code, r.stderr).toBe(0);
      const out = r.stdout.split('\n');
      expect(out[0]).toBe(
        `# lab/web on node-a: VIPs ${LAB.vip}; ports 80/TCP (NodePort ${LAB.nodePort}); endpoints ${LAB.serverPod}:${LAB.serverPort}`,
      );
      expect(out.some((l) => /^\S+Z loopback_pair +new {2}tcp .*\[UNREPLIED\]/.test(l))).toBe(true);
      expect(out.filter(Boolean).at(-1)).toMatch(/^# \d+ entries$/);
      const wrote = /wrote (\d+) packets \((\d+) bytes, (\d+) dropped\) to (.+)$/m.exec(r.stderr);
      expect(wrote, r.stderr).not.toBeNull();
      expect(Number(wrote![1])).toBeGreaterThan(0);
      const read = spawnSync('tcpdump', ['-nr', pcap], { encoding: 'utf8' });
      expect(read.status, read.stderr).toBe(0);
      const packets = read.stdout.trim().split('\n');
      expect(packets).toHaveLength(Number(wrote![1]));
      // Out to the LB, and the same client port back in from the LB to the NodePort: the loop, on the wire.
      expect(packets.some((l) => l.includes(`${LAB.clientPod}.`) && l.includes(`> ${LAB.vip}.${LAB.port}:`))).toBe(
        true,
      );
      expect(
        packets.some((l) => l.includes(`${LAB.clientPod}.`) && l.includes(`> ${LAB.node1}.${LAB.nodePort}:`)),
      ).toBe(true);
    });
    it("through the relay (default): alice, who may get lab/web, gets each node, her token checked by the relay and her access by every agent (the relay's per-node tokens); no exec", async () => {
      api.access.log.length = 0;
      const execsBefore = api.execs.length;
      const r = await cli(['evidence', '--all-nodes', '--service', 'lab/web', '--json', '--kubeconfig', users.alice!]);
      expect(r.code, `${r.stderr}\nrelay: ${relayStderr}`).toBe(1);
      const lines = jsonLines<Line>(r.stdout);
      const entries = (node: string) => lines.filter((l) => l.node === node && l.type === 'entry');
      const pairA = entries('node-a')
        .filter((l) => l.class === 'loopback_pair')
        .map((l) => l.line!);
      expect(pairA.some((l) => l.includes(`src=${LAB.clientPod} dst=${LAB.vip}`) && l.includes('[UNREPLIED]'))).toBe(
        true,
      );
      expect(entries('node-b').some((l) => l.line!.includes(`dst=${LAB.vip}`))).toBe(true);
      expect(entries('node-b').filter((l) => l.class === 'loopback_pair')).toEqual([]);
      const errors = Object.fromEntries(lines.filter((l) => l.type === 'error').map((l) => [l.node, l.message!]));
      expect(Object.keys(errors).sort()).toEqual(['node-c', 'node-d']);
      expect(errors['node-c']).toContain('cannot reach the agent at 127.0.83.4:9811');
      expect(errors['node-d']).toBe('agent pod not running: phase Pending');
      expectSummaryAandB(lines);
      expect(api.execs.length).toBe(execsBefore);
      // alice's access to the Service was asked by the relay and by node-a's and node-b's agents.
      const asked = api.access.log.filter((l) => l.kind === 'SubjectAccessReview').map((l) => l.spec);
      expect(asked.length).toBeGreaterThanOrEqual(3);
      for (const spec of asked)
        expect(spec).toMatchObject({
          user: 'alice',
          resourceAttributes: { verb: 'get', resource: 'services', namespace: 'lab', name: 'web' },
        });
      // Her token never left the relay: it was reviewed for the API server's audience only, and the
      // agents reviewed the relay's own tokens, each for its node's audience, minted per node.
      const reviewed = api.access.log
        .filter((l) => l.kind === 'TokenReview')
        .map((l) => l.spec as { token: string; audiences?: string[] });
      expect(reviewed.filter((r) => r.token === 'alice-token').length).toBeGreaterThan(0);
      for (const r of reviewed.filter((x) => x.token === 'alice-token')) expect(r.audiences).toBeUndefined();
      expect(
        reviewed
          .filter((r) => r.token !== 'alice-token')
          .map((r) => r.audiences)
          .sort(),
      ).toEqual([[evidenceAudience('node-a')], [evidenceAudience('node-b')]]);
      const minted = api.access.log.filter((l) => l.kind === 'TokenRequest').map((l) => l.spec);
      expect(minted.map((m) => (m as { audiences: string[] }).audiences).sort()).toEqual(
        ['node-a', 'node-b', 'node-c'].map((n) => [evidenceAudience(n)]),
      );
      for (const m of minted)
        expect(m).toMatchObject({ namespace: RELAY_SA.namespace, name: RELAY_SA.name, expirationSeconds: 600 });
    });

    it('through the relay, text and --watch: the node column, live entries as they happen, a summary', async () => {
      let connect: Promise<string> | undefined;
      const r = await cli(
        [
          'evidence',
          '--all-nodes',
          '--service',
          'lab/web',
          '--kubeconfig',
          users.alice!,
          '--node',
          'node-a',
          '--watch',
          '4s',
        ],
        {
          onLine: (text) => {
            if (!connect && text.startsWith('node-a  # lab/web')) connect = nodes[0]!.lab.connect(1000);
          },
        },
      );
      expect(await connect).toBe('timeout');
      expect(r.code, r.stderr).toBe(0);
      const live = r.lines.filter((l) => /^node-a {2}\S+Z loopback_pair +new /.test(l.text));
      expect(live.length).toBeGreaterThan(0);
      expect(r.exitAt - live[0]!.at).toBeGreaterThan(1500);
      expect(r.stdout).toContain('# summary: 1 of 1 nodes answered');
    });

    it('bob, on call but without get on the Service, is refused by the relay; carol, without the relay, by the API server (exit 2)', async () => {
      const bob = await cli(['evidence', '--all-nodes', '--service', 'lab/web', '--kubeconfig', users.bob!]);
      expect(bob.code).toBe(2);
      expect(bob.stderr).toContain('403: bob may not get services web in namespace lab');
      const carol = await cli(['evidence', '--all-nodes', '--service', 'lab/web', '--kubeconfig', users.carol!]);
      expect(carol.code).toBe(2);
      expect(carol.stderr).toMatch(
        /403 Forbidden: services "clbprobe-evidence" is forbidden: User "carol" cannot get resource "services\/proxy".*see deploy\/oncall-rbac.yaml/,
      );
    });

    it("each agent checks the token and the user itself: on-call tokens sent straight to it are 401; the relay's token for that node naming bob is 403, naming alice gets the stream", async () => {
      const curl = (token: string, onBehalfOf?: object) =>
        new Promise<string>((resolve) => {
          const named = onBehalfOf ? ['-H', `${ON_BEHALF_OF_HEADER}: ${JSON.stringify(onBehalfOf)}`] : [];
          const p = spawn('ip', [
            'netns',
            'exec',
            nodes[0]!.lab.node.name,
            'curl',
            '-sS',
            '-w',
            '\n%{http_code}',
            '-H',
            `Authorization: Bearer ${token}`,
            ...named,
            'http://127.0.0.1:9811/evidence?service=lab/web',
          ]);
          let out = '';
          p.stdout.on('data', (b: Buffer) => (out += b.toString()));
          p.on('close', () => resolve(out));
        });
      /** A token of the relay's service account for `audience`, as the relay mints it (TokenRequest, 10 min). */
      const relayToken = async (audience: string): Promise<string> => {
        const r = await fetch(
          `${api.url}/api/v1/namespaces/${RELAY_SA.namespace}/serviceaccounts/${RELAY_SA.name}/token`,
          {
            method: 'POST',
            headers: { authorization: 'Bearer fake-token', 'content-type': 'application/json' },
            body: JSON.stringify({
              apiVersion: 'authentication.k8s.io/v1',
              kind: 'TokenRequest',
              spec: { audiences: [audience], expirationSeconds: 600 },
            }),
          },
        );
        expect(r.status).toBe(201);
        return ((await r.json()) as { status: { token: string } }).status.token;
      };
      // Issue 36 finding 5: /evidence reviews tokens for its node's audience only, so an on-call
      // token (good at the API server) is 401 there whoever holds it, and a node never gets one to reuse.
      for (const token of ['bob-token', 'alice-token']) {
        const direct = await curl(token);
        expect(direct.endsWith('\n401')).toBe(true);
        expect(direct).toContain('token not accepted by the API server: invalid bearer token');
      }
      const forA = await relayToken(evidenceAudience('node-a'));
      const denied = await curl(forA, { username: 'bob', groups: ['oncall', 'system:authenticated'] });
      expect(denied.endsWith('\n403')).toBe(true);
      expect(denied).toContain('bob may not get services web in namespace lab');
      const allowed = await curl(forA, { username: 'alice', groups: ['oncall', 'system:authenticated'] });
      expect(allowed.endsWith('\n200')).toBe(true);
      expect(allowed).toContain('"type":"service"');
      expect(allowed).toMatch(/"type":"end","entries":\d+/);
      // What a node receives is good on that node only: node-b's token is 401 on node-a, node-a's at the API server.
      const forB = await curl(await relayToken(evidenceAudience('node-b')), {
        username: 'alice',
        groups: ['oncall', 'system:authenticated'],
      });
      expect(forB.endsWith('\n401')).toBe(true);
      expect((JSON.parse(forB.split('\n')[0]!) as { message: string }).message).toContain(
        `is invalid for the target audiences ["${evidenceAudience('node-a')}"]`,
      );
      const atApi = await fetch(`${api.url}/api/v1/namespaces/clbprobe/services/clbprobe-evidence/proxy/healthz`, {
        headers: { authorization: `Bearer ${forA}` },
      });
      expect(atApi.status).toBe(401);
    });
  },
);
