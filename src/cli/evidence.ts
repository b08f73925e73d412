// `clbprobe evidence`: one Service's conntrack entries, classified, from the local agent's Unix socket; optionally
// watched for a while and captured into a .pcap file.

import { once } from 'node:events';
import { createConnection } from 'node:net';
import type { Command } from 'commander';
import { type EvidenceRequest, parseServiceRef, type ServiceAddresses } from '../agent/evidence.js';
import type { CaptureResult } from '../capture/pcap-capture.js';
import { errText } from '../errors.js';
import { EvidenceLineError, lineSplitter, parseEvidenceLine } from '../remote/evidence-lines.js';
import { DEFAULT_EVIDENCE_SOCKET, parseSeconds } from './agent.js';
import { failing, intFlag, UserError } from './errors.js';
import { textLine } from './evidence-text.js';
import { AGENT_POD_OPTIONS, addOptions, DEFAULT_RELAY, type OptionRow, workstationOptions } from './options.js';

interface EvidenceFlags {
  service: string;
  port?: string;
  watch?: string;
  pcap?: string;
  pcapMax: string;
  json?: boolean;
  socket: string;
  allNodes?: boolean;
  kubeconfig?: string;
  context?: string;
  agentNamespace: string;
  agentSelector: string;
  container: string;
  node?: string[];
  concurrency: string;
  timeout?: string;
  via: 'relay' | 'exec';
  relay: string;
}

/** --node a --node b,c → [a, b, c]. */
const collectNodes = (v: string, prev: string[] = []): string[] => [
  ...prev,
  ...v
    .split(',')
    .map((n) => n.trim())
    .filter(Boolean),
];

/** A pcap filter for everything of the Service: its VIPs, NodePorts and endpoints. */
function pcapFilter(addresses: ServiceAddresses): string {
  const parts = [
    ...addresses.vips.map((v) => `host ${v}`),
    ...addresses.ports.filter((p) => p.nodePort).map((p) => `port ${p.nodePort}`),
    ...addresses.endpoints.map((e) => (e.port ? `(host ${e.address} and port ${e.port})` : `host ${e.address}`)),
  ];
  return parts.length ? parts.join(' or ') : 'ip proto 255';
}

async function runAllNodes(flags: EvidenceFlags, watchS: number): Promise<number> {
  const concurrency = intFlag(flags.concurrency, '--concurrency');
  const { runAllNodes: fanOut } = await import('./evidence-remote.js');
  return fanOut({
    service: flags.service,
    ...(flags.port ? { port: Number(flags.port) } : {}),
    watchS,
    json: Boolean(flags.json),
    ...(flags.kubeconfig ? { kubeconfig: flags.kubeconfig } : {}),
    ...(flags.context ? { context: flags.context } : {}),
    namespace: flags.agentNamespace,
    selector: flags.agentSelector,
    container: flags.container,
    ...(flags.node?.length ? { nodes: flags.node } : {}),
    concurrency,
    timeoutS: flags.timeout ? parseSeconds(flags.timeout, '--timeout') : watchS + 30,
    ...(flags.pcap ? { pcap: flags.pcap, pcapMaxMiB: pcapMaxMiB(flags) } : {}),
    write: (text) => process.stdout.write(text),
    via: flags.via,
    relay: flags.relay,
  });
}

async function run(flags: EvidenceFlags, watchS: number): Promise<void> {
  const req: EvidenceRequest = {
    service: flags.service,
    ...(flags.port ? { port: Number(flags.port) } : {}),
    ...(watchS ? { watchS } : {}),
  };
  // Loaded before asking the agent, so the capture starts once the Service is known; never in the agent's process.
  const capture = flags.pcap ? (await import('../capture/pcap-capture.js')).capture : undefined;
  const sock = createConnection(flags.socket);
  await once(sock, 'connect').catch((e: Error) => {
    throw new UserError(
      `cannot reach the agent at ${flags.socket}: ${e.message} (is clbprobe agent running on this node? --socket)`,
    );
  });
  // `clbprobe evidence | head`: the reader went away; stop quietly, as cat or grep do.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e;
    sock.destroy();
    process.exit(0);
  });
  sock.write(`${JSON.stringify(req)}\n`);
  let pcap: Promise<CaptureResult> | undefined;
  let error: string | undefined;
  const lines = lineSplitter((text) => {
    if (!text.trim()) return;
    const l = parseEvidenceLine(text);
    if (l.type === 'error') error = l.message;
    if (l.type === 'service' && flags.pcap) {
      if (!l.service.ifname) throw new UserError('evidence --pcap: the agent has no uplink interface');
      pcap = capture!(pcapFilter(l.service), {
        ifname: l.service.ifname,
        file: flags.pcap,
        durationS: watchS,
        maxBytes: pcapMaxMiB(flags) << 20,
      });
    }
    // Read from the agent only as fast as our reader takes it (the agent waits for us in turn).
    if (!process.stdout.write(`${flags.json ? text : textLine(l)}\n`)) sock.pause();
  });
  process.stdout.on('drain', () => sock.resume());
  try {
    for await (const chunk of sock) lines.push(chunk as Buffer);
    lines.flush();
  } catch (e) {
    sock.destroy();
    if (e instanceof EvidenceLineError) throw new UserError(`evidence: ${e.message}`);
    throw e;
  }
  if (error) throw new UserError(`evidence: ${error}`);
  if (pcap) {
    const r = await pcap;
    process.stderr.write(
      `clbprobe: wrote ${r.packets} packets (${r.bytes} bytes, ${r.dropped} dropped) to ${r.file}\n`,
    );
    if (r.error) process.stderr.write(`clbprobe: the capture stopped early: ${r.error}\n`);
  }
}

/** --pcap-max in MiB; the default stays well under the agent pod's 256Mi /tmp, whose filling would evict the agent. */
const pcapMaxMiB = (flags: EvidenceFlags): number => intFlag(flags.pcapMax, '--pcap-max', 4096, 'MiB');

/** Usage checks common to both modes; throws UserError (exit 2). */
function checkFlags(flags: EvidenceFlags, cmd: Command): void {
  try {
    parseServiceRef(flags.service);
  } catch (e) {
    throw new UserError(errText(e));
  }
  if (flags.port !== undefined && !/^\d{1,5}$/.test(flags.port))
    throw new UserError(`--port: expected a port number, not ${JSON.stringify(flags.port)}`);
  if (flags.pcap) pcapMaxMiB(flags);
  if (!flags.allNodes) {
    const remote = new Set(REMOTE_OPTIONS.map(([names]) => names));
    const stray = cmd.options.find((o) => remote.has(o.flags) && cmd.getOptionValueSource(o.attributeName()) === 'cli');
    if (stray) throw new UserError(`${stray.long} needs --all-nodes`);
  }
}

const LOCAL_OPTIONS: readonly OptionRow[] = [
  ['--port <port>', 'only this Service port'],
  ['--watch <dur>', 'keep streaming new entries for this long (e.g. 30s, 2m)'],
  [
    '--pcap <file>',
    "also capture the Service's packets for the window (default 30s) into " +
      'FILE (--all-nodes: FILE with the node name inserted, one per node)',
  ],
  ['--pcap-max <MiB>', 'stop writing the capture at this size', '100'],
  ['--json', 'one JSON object per line (with --all-nodes each carries "node" and "pod")'],
  ['--socket <path>', "the agent's evidence socket", DEFAULT_EVIDENCE_SOCKET],
  ['--all-nodes', 'ask every node (or --node ones) through the Kubernetes API'],
];

/** The options that only mean something with --all-nodes. */
const REMOTE_OPTIONS: readonly OptionRow[] = [
  ...workstationOptions('with --all-nodes: '),
  ['--node <names>', 'with --all-nodes: only these nodes (repeat or comma-separate)', collectNodes],
  ...AGENT_POD_OPTIONS,
  [
    '--via <how>',
    'with --all-nodes: relay (the evidence relay checks your access to ' +
      'the Service) or exec (into each agent pod: node admin, for --pcap)',
    'relay',
    ['relay', 'exec'],
  ],
  ['--relay <ns/name>', "with --all-nodes: the evidence relay's Service", DEFAULT_RELAY],
  ['--concurrency <n>', 'nodes asked at the same time', '10'],
  ['--timeout <dur>', 'per-node limit (default: --watch + 30s)'],
];

export function register(program: Command): void {
  const command = program
    .command('evidence')
    .description(
      "Show a Service's conntrack entries on this node (its LB VIPs, NodePorts and endpoints), classified as " +
        'loopback_pair, not_snated, unreplied or healthy, from the local agent over its Unix socket. ' +
        'With --all-nodes, from a workstation: the same from every node through the Kubernetes API: through the ' +
        "evidence relay (the API server's service proxy; needs get " +
        'services/proxy on the relay, deploy/oncall-rbac.yaml, ' +
        'and get on the Service itself), or with --via exec by an exec into each agent pod (list pods, get ' +
        '+ create pods/exec). Exit code with --all-nodes: 0 every node answered, 1 some did not (each is ' +
        'reported; the others still answer), 2 usage or API errors.',
    )
    .requiredOption('--service <ns/name>', 'the Service, NAMESPACE/NAME');
  addOptions(command, [...LOCAL_OPTIONS, ...REMOTE_OPTIONS])
    .addHelpText(
      'after',
      `
Examples:
  clbprobe evidence --service shop/web                          on a node (root), from the local agent
  clbprobe evidence --service shop/web --port 443 --watch 30s --pcap /tmp/web.pcap
  clbprobe evidence --all-nodes --service shop/web              every node, from a workstation
  clbprobe evidence --all-nodes --service shop/web --node node-7,node-9 --watch 1m --json
  clbprobe evidence --all-nodes --service shop/web --node node-7 --watch 30s --pcap web.pcap   writes web.node-7.pcap
  kubectl -n clbprobe exec POD -c agent -- node /app/dist/src/cli/main.js evidence --service shop/web --json`,
    )
    .action(
      failing(async (flags: EvidenceFlags, cmd: Command) => {
        checkFlags(flags, cmd);
        const watchS = flags.watch ? parseSeconds(flags.watch, '--watch') : flags.pcap ? 30 : 0;
        if (!flags.allNodes) return await run(flags, watchS);
        const code = await runAllNodes(flags, watchS);
        // Exit now: sockets the API client keeps alive must not hold the command open.
        process.stdout.write('', () => process.exit(code));
      }),
    );
}
