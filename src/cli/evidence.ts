// `clbprobe evidence`: asks the local agent (Unix socket) for one Service's
// conntrack entries, classified, now and optionally for a while; can also
// capture the Service's packets for the same window into a .pcap file.
import { Command } from 'commander';
import { createConnection } from 'node:net';
import { createInterface } from 'node:readline';
import { parseServiceRef, type EvidenceLine, type EvidenceRequest, type ServiceAddresses } from '../agent/evidence.js';
import { capture, type CaptureResult } from '../capture/evidence.js';
import { DEFAULT_EVIDENCE_SOCKET, parseSeconds } from './agent.js';
import { UserError, fail } from './errors.js';

interface EvidenceFlags {
  service: string;
  port?: string;
  watch?: string;
  pcap?: string;
  json?: boolean;
  socket: string;
  allNodes?: boolean;
}

/** A pcap filter for everything of the Service: its VIPs, NodePorts and endpoints. */
export function pcapFilter(s: ServiceAddresses): string {
  const parts = [
    ...s.vips.map((v) => `host ${v}`),
    ...s.ports.filter((p) => p.nodePort).map((p) => `port ${p.nodePort}`),
    ...s.endpoints.map((e) => (e.port ? `(host ${e.address} and port ${e.port})` : `host ${e.address}`)),
  ];
  return parts.length ? parts.join(' or ') : 'ip proto 255';
}

function textLine(l: EvidenceLine): string {
  switch (l.type) {
    case 'service':
      return `# ${l.service.namespace}/${l.service.name} on ${l.node}: VIPs ${l.service.vips.join(', ') || '-'}; ports ${l.service.ports
        .map((p) => `${p.port}/${p.protocol}${p.nodePort ? ` (NodePort ${p.nodePort})` : ''}`)
        .join(', ')}; endpoints ${l.service.endpoints.map((e) => `${e.address}${e.port ? `:${e.port}` : ''}`).join(', ') || '-'}`;
    case 'entry':
      return `${l.firstSeen} ${l.class.padEnd(13)} ${l.live ? 'new  ' : 'now  '}${l.line}`;
    case 'end':
      return `# ${l.entries} entries`;
    case 'error':
      return `# error: ${l.message}`;
  }
}

async function run(flags: EvidenceFlags): Promise<void> {
  if (flags.allNodes) {
    throw new UserError('evidence --all-nodes: not implemented yet; run `kubectl exec` into the agent pod of each node and call `clbprobe evidence` there');
  }
  parseServiceRef(flags.service);
  const watchS = flags.watch ? parseSeconds(flags.watch, '--watch') : flags.pcap ? 30 : 0;
  const req: EvidenceRequest = { service: flags.service, ...(flags.port ? { port: Number(flags.port) } : {}), ...(watchS ? { watchS } : {}) };
  const sock = createConnection(flags.socket);
  await new Promise<void>((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', (e) => reject(new UserError(`cannot reach the agent at ${flags.socket}: ${e.message} (is clbprobe agent running on this node? --socket)`)));
  });
  sock.write(`${JSON.stringify(req)}\n`);
  let pcap: Promise<CaptureResult> | undefined;
  let error: string | undefined;
  for await (const text of createInterface({ input: sock })) {
    const l = JSON.parse(text) as EvidenceLine;
    if (l.type === 'error') error = l.message;
    if (l.type === 'service' && flags.pcap) {
      if (!l.service.ifname) throw new UserError('evidence --pcap: the agent has no uplink interface');
      pcap = capture(pcapFilter(l.service), { ifname: l.service.ifname, file: flags.pcap, durationS: watchS, maxBytes: 256 << 20 });
    }
    process.stdout.write(`${flags.json ? text : textLine(l)}\n`);
  }
  if (error) throw new UserError(`evidence: ${error}`);
  if (pcap) {
    const r = await pcap;
    process.stderr.write(`clbprobe: wrote ${r.packets} packets (${r.bytes} bytes, ${r.dropped} dropped) to ${r.file}\n`);
  }
}

export function register(program: Command): void {
  program
    .command('evidence')
    .description(
      "Show a Service's conntrack entries on this node (its LB VIPs, NodePorts and endpoints), classified as\n" +
        'loopback_pair, not_snated, unreplied or healthy, from the local agent over its Unix socket.',
    )
    .requiredOption('--service <ns/name>', 'the Service, NAMESPACE/NAME')
    .option('--port <port>', 'only this Service port')
    .option('--watch <dur>', 'keep streaming new entries for this long (e.g. 30s, 2m)')
    .option('--pcap <file>', "also capture the Service's packets for the window (default 30s) into FILE")
    .option('--json', 'one JSON object per line')
    .option('--socket <path>', "the agent's evidence socket", DEFAULT_EVIDENCE_SOCKET)
    .option('--all-nodes', 'fan out to every node through the Kubernetes API (not implemented yet)')
    .addHelpText(
      'after',
      `
Examples:
  clbprobe evidence --service shop/web
  clbprobe evidence --service shop/web --port 443 --watch 30s --pcap /tmp/web.pcap
  kubectl -n clbprobe exec ds/clbprobe -- clbprobe evidence --service shop/web --json`,
    )
    .action(async (flags: EvidenceFlags) => {
      try {
        await run(flags);
      } catch (e) {
        fail(e);
      }
    });
}
