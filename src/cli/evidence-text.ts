// The text form of evidence lines, shared by `clbprobe evidence` on a node
// and `--all-nodes` (which prefixes each line with the node's name).
import type { EvidenceLine } from '../agent/evidence.js';
import { printable } from '../printable.js';

/** One evidence line for a terminal; names, entries and messages come from the cluster and the network, so their control characters are shown. */
export function textLine(line: EvidenceLine): string {
  return printable(rawTextLine(line));
}

function rawTextLine(l: EvidenceLine): string {
  switch (l.type) {
    case 'service':
      return `# ${l.service.namespace}/${l.service.name} on ${l.node}: VIPs ${l.service.vips.join(', ') || '-'}; ports ${l.service.ports
        .map((p) => `${p.port}/${p.protocol}${p.nodePort ? ` (NodePort ${p.nodePort})` : ''}`)
        .join(
          ', ',
        )}; endpoints ${l.service.endpoints.map((e) => `${e.address}${e.port ? `:${e.port}` : ''}`).join(', ') || '-'}`;
    case 'entry':
      return `${l.firstSeen} ${l.class.padEnd(13)} ${l.live ? 'new  ' : 'now  '}${l.line}`;
    case 'end':
      return `# ${l.entries} entries${l.truncated ? ` (truncated: ${l.reason ?? `${l.notSent ?? 'some'} not sent`})` : ''}`;
    case 'error':
      return `# error: ${l.message}`;
  }
}
