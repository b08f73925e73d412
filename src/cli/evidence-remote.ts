// `clbprobe evidence --all-nodes`: from a workstation, asks every node's agent
// through the Kubernetes API. Lists the agent pods, execs `clbprobe evidence
// --json` in each (as `kubectl exec` does, so the cluster's RBAC is the access
// control: list pods + create pods/exec in the agent namespace), streams each
// node's lines as they arrive with the node's name, and ends with a per-node
// summary. A node that fails is reported and does not stop the others.
// Loaded on demand by evidence.ts: @kubernetes/client-node costs ~0.6 s of start-up.
import { KubeConfig } from '@kubernetes/client-node';
import { listAgentPods, planNodes, type AgentPod } from '../remote/agent-pods.js';
import { execInPod, PodExecError } from '../remote/pod-exec.js';
import type { EvidenceLine } from '../agent/evidence.js';
import { UserError } from './errors.js';
import { textLine } from './evidence-text.js';

/** The agent image's entrypoint (Dockerfile ENTRYPOINT): the image has no `clbprobe` on PATH. */
export const AGENT_ENTRYPOINT = ['node', '/app/dist/src/cli/main.js'] as const;

/** Exit code when at least one node did not answer (0: all answered, 2: usage errors). */
export const EXIT_SOME_NODES_FAILED = 1;

export interface AllNodesOptions {
  service: string;
  port?: number;
  watchS: number;
  json: boolean;
  kubeconfig?: string;
  namespace: string;
  selector: string;
  container: string;
  /** Only these nodes. */
  nodes?: string[];
  concurrency: number;
  /** Per node, from the exec's start to its exit status. */
  timeoutS: number;
  /** Where lines go (stdout in the CLI). */
  write: (text: string) => void;
}

/** One node's outcome, as the summary reports it. */
export interface NodeResult {
  node: string;
  pod?: string;
  status: 'ok' | 'failed';
  entries: number;
  error?: string;
}

/** KUBECONFIG / ~/.kube/config / in-cluster, as kubectl finds them, or the given file. */
export function loadWorkstationConfig(file?: string): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (file) kc.loadFromFile(file);
    else kc.loadFromDefault();
  } catch (e) {
    throw new UserError(`cannot load kubeconfig ${file ?? process.env.KUBECONFIG ?? '~/.kube/config'}: ${e instanceof Error ? e.message : String(e)}`);
  }
  const cluster = kc.getCurrentCluster();
  // loadFromDefault's last resort when it found nothing at all.
  if (!cluster || (!file && cluster.name === 'cluster' && cluster.server === 'http://localhost:8080')) {
    throw new UserError('no kubeconfig: set KUBECONFIG, create ~/.kube/config, run in a pod, or pass --kubeconfig FILE');
  }
  return kc;
}

/** The command run inside each agent pod. */
export function remoteCommand(o: Pick<AllNodesOptions, 'service' | 'port' | 'watchS'>): string[] {
  return [
    ...AGENT_ENTRYPOINT,
    'evidence',
    '--service',
    o.service,
    '--json',
    ...(o.port ? ['--port', String(o.port)] : []),
    ...(o.watchS ? ['--watch', `${o.watchS}s`] : []),
  ];
}

/** Splits a byte stream into lines (a frame may end mid-line or mid-character). */
function lineSplitter(onLine: (line: string) => void): { push(b: Buffer): void; flush(): void } {
  let rest: Buffer = Buffer.alloc(0);
  return {
    push(b) {
      rest = rest.length ? Buffer.concat([rest, b]) : b;
      let nl: number;
      while ((nl = rest.indexOf(10)) >= 0) {
        onLine(rest.subarray(0, nl).toString('utf8'));
        rest = rest.subarray(nl + 1);
      }
    },
    flush() {
      if (rest.length) onLine(rest.toString('utf8'));
      rest = Buffer.alloc(0);
    },
  };
}

class Output {
  private readonly width: number;
  constructor(
    private readonly o: AllNodesOptions,
    nodes: string[],
  ) {
    this.width = Math.max(4, ...nodes.map((n) => n.length));
  }

  line(node: string, pod: string | undefined, l: EvidenceLine): void {
    if (this.o.json) this.o.write(`${JSON.stringify(Object.assign({ node, ...(pod ? { pod } : {}) }, l, { node }))}\n`);
    else this.o.write(`${node.padEnd(this.width)}  ${textLine(l)}\n`);
  }

  failure(r: NodeResult): void {
    this.line(r.node, r.pod, { type: 'error', message: r.error ?? 'failed' });
  }

  summary(results: NodeResult[]): void {
    const ok = results.filter((r) => r.status === 'ok').length;
    if (this.o.json) {
      this.o.write(`${JSON.stringify({ type: 'summary', answered: ok, failed: results.length - ok, nodes: results })}\n`);
      return;
    }
    this.o.write(`# summary: ${ok} of ${results.length} nodes answered\n`);
    for (const r of results) {
      const what = r.status === 'ok' ? `${r.entries} entries` : `failed: ${r.error}`;
      this.o.write(`# ${r.node.padEnd(this.width)}  ${(r.pod ?? '-').padEnd(20)}  ${what}\n`);
    }
  }
}

/** Asks one agent pod; never throws: failures become the node's result. */
async function askNode(kc: KubeConfig, o: AllNodesOptions, pod: AgentPod, out: Output): Promise<NodeResult> {
  const result: NodeResult = { node: pod.node, pod: pod.name, status: 'failed', entries: 0 };
  const agentErrors: string[] = [];
  let sawEnd = false;
  let stderrTail = '';
  const stdout = lineSplitter((text) => {
    if (!text.trim()) return;
    let l: EvidenceLine;
    try {
      l = JSON.parse(text) as EvidenceLine;
    } catch {
      agentErrors.push(`unexpected output: ${text.slice(0, 200)}`);
      return;
    }
    if (l.type === 'entry') result.entries++;
    if (l.type === 'end') sawEnd = true;
    if (l.type === 'error') agentErrors.push(l.message);
    out.line(pod.node, pod.name, l);
  });
  const stderr = lineSplitter((text) => {
    if (text.trim()) stderrTail = text.trim();
  });
  try {
    const code = await execInPod(
      kc,
      { namespace: o.namespace, pod: pod.name, container: o.container },
      remoteCommand(o),
      { stdout: (b) => stdout.push(b), stderr: (b) => stderr.push(b) },
      o.timeoutS * 1000,
    );
    stdout.flush();
    stderr.flush();
    if (code === 0 && sawEnd && !agentErrors.length) result.status = 'ok';
    // The remote CLI prints its reason on stderr ("clbprobe: ..."); the JSON error line says the same.
    else result.error = `${agentErrors[0] ?? (stderrTail.replace(/^clbprobe: /, '') || 'no evidence stream')} (exit ${code})`;
  } catch (e) {
    result.error = e instanceof PodExecError ? e.message : String(e);
  }
  if (result.status === 'failed' && !pod.ready) result.error += ' (the agent container is not ready)';
  if (result.status === 'failed') out.failure(result);
  return result;
}

/** Runs the fan-out; returns the exit code (0 all nodes answered, 1 some did not). */
export async function runAllNodes(o: AllNodesOptions): Promise<number> {
  const kc = loadWorkstationConfig(o.kubeconfig);
  let pods: AgentPod[];
  try {
    pods = await listAgentPods(kc, o.namespace, o.selector, o.container, 30_000);
  } catch (e) {
    throw new UserError(e instanceof Error ? e.message : String(e));
  }
  if (!pods.length) {
    throw new UserError(`no agent pods match ${o.selector} in namespace ${o.namespace} (is clbprobe deployed? --agent-namespace, --agent-selector)`);
  }
  const plan = planNodes(pods, o.container, o.nodes);
  const out = new Output(o, [...plan.ask.map((p) => p.node), ...plan.unreachable.map((u) => u.node)]);
  const results: NodeResult[] = plan.unreachable.map((u) => ({ node: u.node, ...(u.pod ? { pod: u.pod } : {}), status: 'failed', entries: 0, error: u.reason }));
  for (const r of results) out.failure(r);
  const queue = [...plan.ask];
  const worker = async (): Promise<void> => {
    for (let pod = queue.shift(); pod; pod = queue.shift()) results.push(await askNode(kc, o, pod, out));
  };
  await Promise.all(Array.from({ length: Math.min(o.concurrency, queue.length) }, worker));
  results.sort((a, b) => a.node.localeCompare(b.node));
  out.summary(results);
  return results.every((r) => r.status === 'ok') ? 0 : EXIT_SOME_NODES_FAILED;
}
