// `clbprobe evidence --all-nodes`: every node's agent from a workstation, through the evidence relay or an exec into
// each agent pod (RBAC is the access control); each node's lines as they come, then a per-node summary.
import { randomBytes } from 'node:crypto';
import { closeSync, writeSync } from 'node:fs';
import { extname } from 'node:path';
import type { EvidenceLine } from '../agent/evidence.js';
import { createCaptureFile } from '../capture/output-file.js';
import { isObj, isStr } from '../cluster/fields.js';
import type { ApiTarget } from '../cluster/kube-config.js';
import { byText } from '../compare.js';
import { errText } from '../errors.js';
import { printable } from '../printable.js';
import { type AgentPod, notReadyNote, planNodes } from '../remote/agent-pods.js';
import { EvidenceTally, evidenceLineOf, jsonObject, lineSplitter } from '../remote/evidence-lines.js';
import { type ExecTarget, execInPod, PodExecError } from '../remote/pod-exec.js';
import { evidenceSearch, type RelayNodeResult, unreachableResult } from '../remote/relay.js';
import { eachPod } from '../remote/relay-common.js';
import { listAgentPods, loadWorkstationConfig } from '../remote/workstation-client.js';
import { UserError } from './errors.js';
import { textLine } from './evidence-text.js';
import { DEFAULT_RELAY } from './options.js';

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
  nodes?: string[];
  concurrency: number;
  /** Per node, from the exec's start to its exit status. */
  timeoutS: number;
  /** Capture on each node too, into this file name with the node inserted (web.pcap → web.NODE.pcap). */
  pcap?: string;
  /** Size cap of each node's capture (the remote --pcap-max). */
  pcapMaxMiB?: number;
  write: (text: string) => void;
  /** relay (default): the evidence relay asks each agent with the caller's token; exec: node admin, for --pcap. */
  via?: 'relay' | 'exec';
  relay?: string;
}

/** One node's outcome, as the summary reports it, with its capture copied to this machine. */
export type NodeResult = RelayNodeResult & { pcap?: { file: string; packets: number; bytes: number; dropped: number } };

/** The agent pods' scratch space (an emptyDir in deploy/daemonset.yaml). */
const REMOTE_TMP = '/tmp';

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

  line(node: string, pod: string | undefined, line: EvidenceLine): void {
    if (this.o.json)
      this.o.write(`${JSON.stringify(Object.assign({ node, ...(pod ? { pod } : {}) }, line, { node }))}\n`);
    else this.o.write(`${printable(node.padEnd(this.width))}  ${textLine(line)}\n`);
  }

  failure(result: NodeResult): void {
    this.line(result.node, result.pod, { type: 'error', message: result.error ?? 'failed' });
  }

  /** Writes the summary; the exit code. */
  summary(results: NodeResult[]): number {
    const ok = results.filter((r) => r.status === 'ok').length;
    if (this.o.json)
      this.o.write(
        `${JSON.stringify({ type: 'summary', answered: ok, failed: results.length - ok, nodes: results })}\n`,
      );
    else {
      this.o.write(`# summary: ${ok} of ${results.length} nodes answered\n`);
      for (const r of results) {
        const pcap = r.pcap ? `; ${r.pcap.packets} packets (${r.pcap.dropped} dropped) in ${r.pcap.file}` : '';
        const what = r.status === 'ok' ? `${r.entries} entries${pcap}` : `failed: ${r.error}`;
        this.o.write(`${printable(`# ${r.node.padEnd(this.width)}  ${(r.pod ?? '-').padEnd(20)}  ${what}`)}\n`);
      }
    }
    return ok === results.length ? 0 : EXIT_SOME_NODES_FAILED;
  }
}

/** Asks one agent pod; never throws: failures become the node's result. */
async function askNode(api: ApiTarget, options: AllNodesOptions, pod: AgentPod, out: Output): Promise<NodeResult> {
  const result: NodeResult = { node: pod.node, pod: pod.name, status: 'failed', entries: 0 };
  const tally = new EvidenceTally();
  const stdout = lineSplitter((text) => {
    const l = text.trim() ? tally.read(text) : undefined;
    if (l) out.line(pod.node, pod.name, l);
  });
  let stderrTail = '';
  // The remote capture's report: "clbprobe: wrote N packets (B bytes, D dropped) to FILE".
  let wrote: RegExpExecArray | undefined;
  const stderr = lineSplitter((text) => {
    if (text.trim()) stderrTail = text.trim();
    wrote = /wrote (\d+) packets \((\d+) bytes, (\d+) dropped\)/.exec(text) ?? wrote;
  });
  // A line past the bound is the node's error, never this process's.
  const push = (lines: ReturnType<typeof lineSplitter>, buf: Buffer): void => {
    try {
      lines.push(buf);
    } catch (e) {
      tally.errors.push(errText(e));
    }
  };
  const target = { namespace: options.namespace, pod: pod.name, container: options.container };
  const remotePcap = options.pcap
    ? `${REMOTE_TMP}/clbprobe-evidence-${randomBytes(6).toString('hex')}.pcap`
    : undefined;
  let ran = false;
  try {
    const output = { stdout: (b: Buffer) => push(stdout, b), stderr: (b: Buffer) => push(stderr, b) };
    const code = await execInPod(api, target, remoteCommand(options, remotePcap), output, options.timeoutS * 1000);
    ran = true;
    stdout.flush();
    stderr.flush();
    if (code === 0 && tally.ended && !tally.errors.length) result.status = 'ok';
    // The remote CLI prints its reason on stderr ("clbprobe: ..."); the JSON error line says the same.
    else {
      const reason = tally.errors[0] ?? (stderrTail.replace(/^clbprobe: /, '') || 'no evidence stream');
      result.error = `${reason} (exit ${code})`;
    }
  } catch (e) {
    result.error = e instanceof PodExecError ? e.message : String(e);
    ran = e instanceof PodExecError && e.kind === 'timeout';
  }
  result.entries = tally.entries;
  if (remotePcap && result.status === 'ok') {
    const file = pcapFileFor(options.pcap!, pod.node);
    const m = wrote as RegExpExecArray | undefined;
    try {
      const bytes = await copyOut(api, target, remotePcap, file, options.timeoutS * 1000);
      result.pcap = { file, packets: Number(m?.[1] ?? 0), bytes, dropped: Number(m?.[3] ?? 0) };
      if (m && Number(m[2]) !== bytes) throw new Error(`got ${bytes} of the capture's ${m[2]} bytes`);
    } catch (e) {
      result.status = 'failed';
      result.error = `the evidence came, but copying its capture failed: ${errText(e)}`;
    }
  } else if (remotePcap && ran) {
    // Best effort: do not leave a partial capture in the pod's scratch space.
    const ignore = { stdout: () => undefined, stderr: () => undefined };
    await execInPod(api, target, ['rm', '-f', '--', remotePcap], ignore, 10_000).catch(() => undefined);
  }
  if (result.status === 'failed') {
    result.error += notReadyNote(pod);
    out.failure(result);
  }
  return result;
}

/** Streams a file out of the pod into `local` and removes it there; returns the bytes written. */
async function copyOut(
  api: ApiTarget,
  target: ExecTarget,
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
      target,
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

/** Asks the evidence relay, which fans out to the nodes; same output and exit codes as the exec fan-out. */
async function runViaRelay(options: AllNodesOptions, api: ApiTarget): Promise<number> {
  if (options.pcap)
    throw new UserError(
      '--pcap with --all-nodes copies each capture out of the agent pod: ' +
        'add --via exec (needs pods/exec, deploy/README.md)',
    );
  const [namespace = '', service = ''] = (options.relay ?? DEFAULT_RELAY).split('/');
  const query = evidenceSearch(options.service, options.port, options.watchS);
  for (const n of options.nodes ?? []) query.append('node', n);
  const out = new Output(options, options.nodes ?? []);
  let summary: NodeResult[] | undefined;
  /** Node ('?' when the line names none) -> the first malformed line the relay passed on from it. */
  const malformed = new Map<string, string>();
  const { askRelay } = await import('../remote/relay-client.js');
  const onLine = (text: string): void => {
    if (!text.trim()) return;
    const l = relayLine(text);
    if ('summary' in l) summary = l.summary;
    else if ('line' in l) out.line(l.node, l.pod, l.line);
    else {
      // One agent's (or a mangled) line is that node's failure, reported in place; the others go on.
      if (!malformed.has(l.node)) malformed.set(l.node, l.error);
      out.line(l.node, l.pod, { type: 'error', message: l.error });
    }
  };
  await askRelay(api, { namespace, service }, query, onLine, (options.timeoutS + 30) * 1000);
  if (!summary) {
    const first = malformed.size ? ` (malformed lines: ${[...malformed.values()][0]})` : '';
    throw new UserError(`the evidence relay ended without its summary${first}`);
  }
  const results = summary;
  if (results.length === 0 && malformed.size === 0)
    throw new UserError('the evidence relay found no agent pod to ask (is the clbprobe DaemonSet deployed?)');
  for (const [node, error] of malformed) {
    const r = results.find((x) => x.node === node);
    if (r) Object.assign(r, { status: 'failed', error: r.error ?? error });
    else results.push({ node, status: 'failed', entries: 0, error });
  }
  return out.summary(results);
}

type RelayLine = { node: string; pod?: string } & (
  | { summary: NodeResult[] }
  | { line: EvidenceLine }
  | { error: string }
);

/** One line of the relay's answer, checked as the text form will read it; a malformed one says why. */
function relayLine(text: string): RelayLine {
  const value = jsonObject(text);
  if (typeof value === 'string')
    return { node: '?', error: `the relay sent a line that is ${value}: ${text.slice(0, 120)}` };
  const { node, pod, ...rest } = value;
  const nodeName = typeof node === 'string' ? node : '?';
  const podName = typeof pod === 'string' ? { pod } : {};
  if (rest.type === 'summary') {
    const nodes = Array.isArray(rest.nodes) ? rest.nodes : undefined;
    if (nodes?.every(isNodeResult)) return { node: nodeName, summary: nodes };
    return { node: '?', error: `the relay sent a summary without its nodes: ${text.slice(0, 120)}` };
  }
  try {
    // A service line names its node itself; the relay's "node" is that node.
    return {
      node: nodeName,
      ...podName,
      line: evidenceLineOf(rest.type === 'service' ? { ...rest, node } : rest, text),
    };
  } catch (e) {
    return { node: nodeName, ...podName, error: errText(e) };
  }
}

function isNodeResult(v: unknown): v is NodeResult {
  return (
    isObj(v) &&
    isStr(v.node) &&
    (v.status === 'ok' || v.status === 'failed') &&
    Number.isInteger(v.entries) &&
    [v.pod, v.error].every((x) => x === undefined || isStr(x))
  );
}

/** Runs the fan-out; returns the exit code (0 all nodes answered, 1 some did not). */
export async function runAllNodes(options: AllNodesOptions): Promise<number> {
  const api = loadWorkstationConfig(options.kubeconfig, options.context);
  if ((options.via ?? 'relay') === 'relay') return runViaRelay(options, api);
  const pods = await listAgentPods(api, options.namespace, options.selector, options.container, 30_000);
  if (!pods.length) {
    throw new UserError(
      `no agent pods match ${options.selector} in namespace ${options.namespace} ` +
        `(is clbprobe deployed? --agent-namespace, --agent-selector)`,
    );
  }
  const plan = planNodes(pods, options.container, options.nodes);
  const out = new Output(options, [...plan.ask.map((p) => p.node), ...plan.unreachable.map((u) => u.node)]);
  const results: NodeResult[] = plan.unreachable.map(unreachableResult);
  for (const r of results) out.failure(r);
  results.push(...(await eachPod(plan.ask, options.concurrency, (pod) => askNode(api, options, pod, out))));
  results.sort((a, b) => byText(a.node, b.node));
  return out.summary(results);
}
