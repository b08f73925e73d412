// conntrack(8)'s text form of an entry, so evidence reads exactly like
// `conntrack -L` (tests compare the two line by line).
import type { ConntrackEntry, ConntrackTuple } from '../types.js';
import { IPS_ASSURED, IPS_SEEN_REPLY } from './constants.js';

function tupleText(tuple: ConntrackTuple): string {
  let s = `src=${tuple.src} dst=${tuple.dst} `;
  if (tuple.icmpType !== undefined) s += `type=${tuple.icmpType} code=${tuple.icmpCode ?? 0} id=${tuple.icmpId ?? 0} `;
  else if (tuple.sport !== undefined || tuple.dport !== undefined)
    s += `sport=${tuple.sport ?? 0} dport=${tuple.dport ?? 0} `;
  return s;
}

function counters(c: { packets: number; bytes: number } | undefined): string {
  return c ? `packets=${c.packets} bytes=${c.bytes} ` : '';
}

/** `extended` (-o extended) puts the l3 protocol first, `id` (-o id) the entry id last. */
export function formatConntrack(entry: ConntrackEntry, opts: { extended?: boolean; id?: boolean } = {}): string {
  let s = '';
  if (opts.extended) s += `${(entry.family === 4 ? 'ipv4' : 'ipv6').padEnd(8)} ${entry.family === 4 ? 2 : 10} `;
  s += `${entry.proto.padEnd(8)} ${entry.orig.protoNum} ${entry.timeoutS} `;
  const state = entry.tcpState ?? entry.sctpState;
  if (state) s += `${state} `;
  s += tupleText(entry.orig) + counters(entry.origCounters);
  if (!(entry.status & IPS_SEEN_REPLY)) s += '[UNREPLIED] ';
  s += tupleText(entry.reply) + counters(entry.replyCounters);
  if (entry.status & IPS_ASSURED) s += '[ASSURED] ';
  s += `mark=${entry.mark} `;
  if (entry.zone) s += `zone=${entry.zone} `;
  if (entry.use !== undefined) s += `use=${entry.use} `;
  if (opts.id) s += `id=${entry.id} `;
  return s.trimEnd();
}
