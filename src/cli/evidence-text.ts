// The text form of evidence lines, shared by `clbprobe evidence` on a node
// and `--all-nodes` (which prefixes each line with the node's name).
import type { EvidenceLine } from '../agent/evidence.js';
import { printable } from '../printable.js';

/** One evidence line for a terminal, its control characters shown (names, entries and messages come from outside). */
export function textLine(line: EvidenceLine): string {
  return printable(rawTextLine(line));
}

function rawTextLine(line: EvidenceLine): string {
  switch (line.type) {
    case 'service': {
      const { service } = line;
      const ports = service.ports.map((p) => `${p.port}/${p.protocol}${p.nodePort ? ` (NodePort ${p.nodePort})` : ''}`);
      const endpoints = service.endpoints.map((e) => `${e.address}${e.port ? `:${e.port}` : ''}`);
      return (
        `# ${service.namespace}/${service.name} on ${line.node}: VIPs ${service.vips.join(', ') || '-'}; ` +
        `ports ${ports.join(', ')}; endpoints ${endpoints.join(', ') || '-'}`
      );
    }
    case 'entry':
      return `${line.firstSeen} ${line.class.padEnd(13)} ${line.live ? 'new  ' : 'now  '}${line.line}`;
    case 'end':
      return (
        `# ${line.entries} entries` +
        `${line.truncated ? ` (truncated: ${line.reason ?? `${line.notSent ?? 'some'} not sent`})` : ''}`
      );
    case 'error':
      return `# error: ${line.message}`;
  }
}
