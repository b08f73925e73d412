// `clbprobe evidence --all-nodes`: from a workstation, asks every node's agent
// through the Kubernetes API. Lists the agent pods, execs `clbprobe evidence
// --json` in each (as `kubectl exec` does, so the cluster's RBAC is the access
// control: list pods + create pods/exec in the agent namespace), streams each
// node's lines as they arrive with the node's name, and ends with a per-node
// summary. A node that fails is reported and does not stop the others.
// Loaded on demand by evidence.ts.
import { randomBytes } from 'node:crypto';
import { closeSync, writeSync } from 'node:fs';
import { extname } from 'node:path';
import type { EvidenceLine } from '../agent/evidence.js';
import { createCaptureFile } from '../capture/output-file.js';
import type { ApiTarget } from '../cluster/kube-config.js';
import { byText } from '../compare.js';
import { errText } from '../errors.js';
import { printable } from '../printable.js';
import { type AgentPod, planNodes } from '../remote/agent-pods.js';
import { evidenceLineOf, lineSplitter, parseEvidenceLine } from '../remote/evidence-lines.js';
import { execInPod, PodExecError } from '../remote/pod-exec.js';
import { listAgentPods, loadWorkstationConfig } from '../remote/workstation-client.js';
import { UserError } from './errors.js';
import { textLine } from './evidence-text.js';

/** The agent image's entrypoint (Dockerfile ENTRYPOINT): the image has no `clbprobe` on PATH. */
export const AGENT_ENTRYPOINT = ['node', '/app/dist/bundle/main.js'] as const;

/** Exit code when at least one node did not answer (0: all answered, 2: usage errors). */
export const EXIT_SOME_NODES_FAILED = 1;

export interface AllNodesOptions {
  service: string;
  port?: number;
  watchS: number;
  json: boolean;
  kubeconfig?: string;
  /** The kubeconfig context instead of its current-context (kubectl's --context). */
  context?: string;
  namespace: string;
  selector: string;
  container: string;
  /** Only these nodes. */
  nodes?: string[];
  concurrency: number;
  /** Per node, from the exec's start to its exit status. */
  timeoutS: number;
  /** Capture on each node too, into this file name with the node inserted (web.pcap → web.NODE.pcap). */
  pcap?: string;
  /** Size cap of each node's capture (the remote --pcap-max). */
  pcapMaxMiB?: number;
  /** Where lines go (stdout in the CLI). */
  write: (text: string) => void;
  /**
   * relay (default): one request to the evidence relay through the API server's service proxy,
   * which asks each agent with the caller's token (deploy/evidence-relay.yaml); exec: an exec into
   * each agent pod (node admin: needed only for --pcap).
   */
  via?: 'relay' | 'exec';
  /** The relay's Service, NAMESPACE/NAME. */
  relay?: string;
}

/** One node's outcome, as the summary reports it. */
export interface NodeResult {
  node: string;
  pod?: string;
  status: 'ok' | 'failed';
  entries: number;
  error?: string;
  pcap?: PcapCopy;
}

/** A node's capture, copied to this machine. */
export interface PcapCopy {
  file: string;
  packets: number;
  bytes: number;
  dropped: number;
}

/** The agent pods' scratch space (an emptyDir in deploy/daemonset.yaml). */
const REMOTE_TMP = '/tmp';

/** The command run inside each agent pod. */
export function remoteCommand(
  o: Pick<AllNodesOptions, 'service' | 'port' | 'watchS' | 'pcapMaxMiB'>,
  remotePcap?: string,
): string[] {
  return [
    ...AGENT_ENTRYPOINT,
    'evidence',
    '--service',
    o.service,
    '--json',
    ...(o.port ? ['--port', String(o.port)] : []),
    ...(o.watchS ? ['--watch', `${o.watchS}s`] : []),
    ...(remotePcap ? ['--pcap', remotePcap, ...(o.pcapMaxMiB ? ['--pcap-max', String(o.pcapMaxMiB)] : [])] : []),
  ];
}

/** web.pcap → web.node-1.pcap; web → web.node-1. */
export function pcapFileFor(base: string, node: string): string {
  const ext = extname(base);
  return `${base.slice(0, base.length - ext.length)}.${node}${ext}`;
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
    else this.o.write(`${printable(node.padEnd(this.width))}  ${textLine(l)}\n`);
  }

  failure(r: NodeResult): void {
    this.line(r.node, r.pod, { type: 'error', message: r.error ?? 'failed' });
  }

  summary(results: NodeResult[]): void {
    const ok = results.filter((r) => r.status === 'ok').length;
    if (this.o.json) {
      this.o.write(
        `${JSON.stringify({ type: 'summary', answered: ok, failed: results.length - ok, nodes: results })}\n`,
      );
      return;
    }
    this.o.write(`# summary: ${ok} of ${results.length} nodes answered\n`);
    for (const r of results) {
      const pcap = r.pcap ? `; ${r.pcap.packets} packets (${r.pcap.dropped} dropped) in ${r.pcap.file}` : '';
      const what = r.status === 'ok' ? `${r.entries} entries${pcap}` : `failed: ${r.error}`;
      this.o.write(`${printable(`# ${r.node.padEnd(this.width)}  ${(r.pod ?? '-').padEnd(20)}  ${what}`)}\n`);
    }
  }
}

/** Asks one agent pod; never throws: failures become the node's result. */
async function askNode(api: ApiTarget, o: AllNodesOptions, pod: AgentPod, out: Output): Promise<NodeResult> {
  const result: NodeResult = { node: pod.node, pod: pod.name, status: 'failed', entries: 0 };
  const agentErrors: string[] = [];
  let sawEnd = false;
  let stderrTail = '';
  const stdout = lineSplitter((text) => {
    if (!text.trim()) return;
    let l: EvidenceLine;
    try {
      l = parseEvidenceLine(text);
    } catch {
      agentErrors.push(`unexpected output: ${text.slice(0, 200)}`);
      return;
    }
    if (l.type === 'entry') result.entries++;
    if (l.type === 'end') sawEnd = true;
    if (l.type === 'error') agentErrors.push(l.message);
    out.line(pod.node, pod.name, l);
  });
  let wrote: RegExpExecArray | null = null;
  const stderr = lineSplitter((text) => {
    if (text.trim()) stderrTail = text.trim();
    // The remote capture's report: "clbprobe: wrote N packets (B bytes, D dropped) to FILE".
    wrote = /wrote (\d+) packets \((\d+) bytes, (\d+) dropped\)/.exec(text) ?? wrote;
  });
  const target = { namespace: o.namespace, pod: pod.name, container: o.container };
  const remotePcap = o.pcap ? `${REMOTE_TMP}/clbprobe-evidence-${randomBytes(6).toString('hex')}.pcap` : undefined;
  let ran = false;
  // A line past the bound is the node's error, never this process's.
  const pushLines = (s: ReturnType<typeof lineSplitter>, b: Buffer): void => {
    try {
      s.push(b);
    } catch (e) {
      agentErrors.push((e as Error).message);
    }
  };
  try {
    const code = await execInPod(
      api,
      target,
      remoteCommand(o, remotePcap),
      { stdout: (b) => pushLines(stdout, b), stderr: (b) => pushLines(stderr, b) },
      o.timeoutS * 1000,
    );
    ran = true;
    stdout.flush();
    stderr.flush();
    if (code === 0 && sawEnd && !agentErrors.length) result.status = 'ok';
    // The remote CLI prints its reason on stderr ("clbprobe: ..."); the JSON error line says the same.
    else {
      const reason = agentErrors[0] ?? (stderrTail.replace(/^clbprobe: /, '') || 'no evidence stream');
      result.error = `${reason} (exit ${code})`;
    }
  } catch (e) {
    result.error = e instanceof PodExecError ? e.message : String(e);
    ran = e instanceof PodExecError && e.kind === 'timeout';
  }
  if (remotePcap && result.status === 'ok') {
    const m = wrote as RegExpExecArray | null;
    const file = pcapFileFor(o.pcap!, pod.node);
    try {
      const bytes = await copyOut(api, target, remotePcap, file, o.timeoutS * 1000);
      result.pcap = { file, packets: Number(m?.[1] ?? 0), bytes, dropped: Number(m?.[3] ?? 0) };
      if (m && Number(m[2]) !== bytes) throw new Error(`got ${bytes} of the capture's ${m[2]} bytes`);
    } catch (e) {
      result.status = 'failed';
      result.error = `the evidence came, but copying its capture failed: ${errText(e)}`;
    }
  } else if (remotePcap && ran) {
    // Best effort: do not leave a partial capture in the pod's scratch space.
    await execInPod(
      api,
      target,
      ['rm', '-f', '--', remotePcap],
      { stdout: () => undefined, stderr: () => undefined },
      10_000,
    ).catch(() => undefined);
  }
  if (result.status === 'failed' && !pod.ready) result.error += ' (the agent container is not ready)';
  if (result.status === 'failed') out.failure(result);
  return result;
}

/** Streams a file out of the pod into `local` and removes it there; returns the bytes written. */
async function copyOut(
  api: ApiTarget,
  t: { namespace: string; pod: string; container: string },
  remote: string,
  local: string,
  timeoutMs: number,
): Promise<number> {
  const fd = createCaptureFile(local);
  let bytes = 0;
  let err = '';
  try {
    const code = await execInPod(
      api,
      t,
      ['sh', '-c', 'cat -- "$0" && rm -f -- "$0"', remote],
      { stdout: (b) => (bytes += writeSync(fd, b)), stderr: (b) => (err += b.toString()) },
      timeoutMs,
    );
    if (code !== 0) throw new Error(`cat ${remote} exited ${code}: ${err.trim()}`);
    return bytes;
  } finally {
    closeSync(fd);
  }
}

/** The relay's Service when --relay is not given. */
export const DEFAULT_RELAY = 'clbprobe/clbprobe-evidence';

/** Asks the evidence relay, which fans out to the nodes; same output and exit codes as the exec fan-out. */
async function runViaRelay(o: AllNodesOptions, api: ApiTarget): Promise<number> {
  if (o.pcap)
    throw new UserError(
      '--pcap with --all-nodes copies each capture out of the agent ' +
        'pod: add --via exec (needs pods/exec, deploy/README.md)',
    );
  const [namespace = '', service = ''] = (o.relay ?? DEFAULT_RELAY).split('/');
  const query = new URLSearchParams({ service: o.service });
  if (o.port) query.set('port', String(o.port));
  if (o.watchS) query.set('watch', String(o.watchS));
  for (const n of o.nodes ?? []) query.append('node', n);
  const out = new Output(o, o.nodes ?? []);
  let summary: NodeResult[] | undefined;
  /** Node ('?' when the line names none) -> the first malformed line the relay passed on from it. */
  const malformed = new Map<string, string>();
  const { askRelay, RelayError } = await import('../remote/relay-client.js');
  try {
    await askRelay(
      api,
      { namespace, service },
      query,
      (text) => {
        if (!text.trim()) return;
        const l = relayLine(text);
        if (l.summary) summary = l.summary;
        else if (l.line) out.line(l.node, l.pod, l.line);
        else {
          // One agent's (or a mangled) line is that node's failure, reported in place; the others go on.
          if (!malformed.has(l.node)) malformed.set(l.node, l.error);
          out.line(l.node, l.pod, { type: 'error', message: l.error });
        }
      },
      (o.timeoutS + 30) * 1000,
    );
  } catch (e) {
    throw new UserError(e instanceof RelayError ? e.message : String(e));
  }
  if (!summary)
    throw new UserError(
      `the evidence relay ended without its summary` +
        `${malformed.size ? ` (malformed lines: ${[...malformed.values()][0]})` : ''}`,
    );
  const results: NodeResult[] = summary;
  for (const [node, error] of malformed) {
    const r = results.find((x) => x.node === node);
    if (r) Object.assign(r, { status: 'failed', error: r.error ?? error });
    else results.push({ node, status: 'failed', entries: 0, error });
  }
  out.summary(results);
  return results.every((r) => r.status === 'ok') ? 0 : EXIT_SOME_NODES_FAILED;
}

type RelayLine =
  | { summary: NodeResult[]; line?: undefined; node: string; pod?: undefined; error?: undefined }
  | { summary?: undefined; line: EvidenceLine; node: string; pod?: string; error?: undefined }
  | { summary?: undefined; line?: undefined; node: string; pod?: string; error: string };

/** One line of the relay's answer, checked as the text form will read it; a malformed one says why. */
export function relayLine(text: string): RelayLine {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { node: '?', error: `the relay sent a line that is not JSON: ${text.slice(0, 120)}` };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return { node: '?', error: `the relay sent a line that is not an object: ${text.slice(0, 120)}` };
  const { node, pod, ...rest } = value as Record<string, unknown>;
  const nodeName = typeof node === 'string' ? node : '?';
  const podName = typeof pod === 'string' ? pod : undefined;
  if (rest.type === 'summary') {
    const nodes = Array.isArray(rest.nodes) ? rest.nodes.filter(isNodeResult) : undefined;
    if (nodes && nodes.length === (rest.nodes as unknown[]).length) return { node: nodeName, summary: nodes };
    return { node: '?', error: `the relay sent a summary without its nodes: ${text.slice(0, 120)}` };
  }
  try {
    // A service line names its node itself; the relay's "node" is that node.
    return {
      node: nodeName,
      ...(podName ? { pod: podName } : {}),
      line: evidenceLineOf(rest.type === 'service' ? { ...rest, node } : rest, text),
    };
  } catch (e) {
    return { node: nodeName, ...(podName ? { pod: podName } : {}), error: (e as Error).message };
  }
}

function isNodeResult(v: unknown): v is NodeResult {
  const r = v as Partial<NodeResult> | null;
  return (
    typeof r === 'object' &&
    r !== null &&
    typeof r.node === 'string' &&
    (r.status === 'ok' || r.status === 'failed') &&
    Number.isInteger(r.entries) &&
    (r.pod === undefined || typeof r.pod === 'string') &&
    (r.error === undefined || typeof r.error === 'string')
  );
}

/** Runs the fan-out; returns the exit code (0 all nodes answered, 1 some did not). */
export async function runAllNodes(o: AllNodesOptions): Promise<number> {
  const api = loadWorkstationConfig(o.kubeconfig, o.context);
  if ((o.via ?? 'relay') === 'relay') return runViaRelay(o, api);
  let pods: AgentPod[];
  try {
    pods = await listAgentPods(api, o.namespace, o.selector, o.container, 30_000);
  } catch (e) {
    throw new UserError(errText(e));
  }
  if (!pods.length) {
    throw new UserError(
      `no agent pods match ${o.selector} in namespace ${o.namespace} ` +
        `(is clbprobe deployed? --agent-namespace, --agent-selector)`,
    );
  }
  const plan = planNodes(pods, o.container, o.nodes);
  const out = new Output(o, [...plan.ask.map((p) => p.node), ...plan.unreachable.map((u) => u.node)]);
  const results: NodeResult[] = plan.unreachable.map((u) => ({
    node: u.node,
    ...(u.pod ? { pod: u.pod } : {}),
    status: 'failed',
    entries: 0,
    error: u.reason,
  }));
  for (const r of results) out.failure(r);
  const queue = [...plan.ask];
  const worker = async (): Promise<void> => {
    for (let pod = queue.shift(); pod; pod = queue.shift()) results.push(await askNode(api, o, pod, out));
  };
  await Promise.all(Array.from({ length: Math.min(o.concurrency, queue.length) }, worker));
  results.sort((a, b) => byText(a.node, b.node));
  out.summary(results);
  return results.every((r) => r.status === 'ok') ? 0 : EXIT_SOME_NODES_FAILED;
}
