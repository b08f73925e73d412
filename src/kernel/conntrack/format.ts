// conntrack(8)'s text form of an entry, so evidence reads exactly like
// `conntrack -L` (tests compare the two line by line).
import type { ConntrackEntry, ConntrackTuple } from '../types.js';
import { IPS_ASSURED, IPS_SEEN_REPLY } from './constants.js';

function tuple(t: ConntrackTuple): string {
  let s = `src=${t.src} dst=${t.dst} `;
  if (t.icmpType !== undefined) s += `type=${t.icmpType} code=${t.icmpCode ?? 0} id=${t.icmpId ?? 0} `;
  else if (t.sport !== undefined || t.dport !== undefined) s += `sport=${t.sport ?? 0} dport=${t.dport ?? 0} `;
  return s;
}

function counters(c: { packets: number; bytes: number } | undefined): string {
  return c ? `packets=${c.packets} bytes=${c.bytes} ` : '';
}

export interface FormatOptions {
  /** `-o extended`: the l3 protocol first. */
  extended?: boolean;
  /** `-o id`: the entry id last. */
  id?: boolean;
}

export function formatConntrack(e: ConntrackEntry, opts: FormatOptions = {}): string {
  let s = '';
  if (opts.extended) s += `${(e.family === 4 ? 'ipv4' : 'ipv6').padEnd(8)} ${e.family === 4 ? 2 : 10} `;
  s += `${e.proto.padEnd(8)} ${e.orig.protoNum} ${e.timeoutS} `;
  if (e.tcpState) s += `${e.tcpState} `;
  s += tuple(e.orig) + counters(e.origCounters);
  if (!(e.status & IPS_SEEN_REPLY)) s += '[UNREPLIED] ';
  s += tuple(e.reply) + counters(e.replyCounters);
  if (e.status & IPS_ASSURED) s += '[ASSURED] ';
  s += `mark=${e.mark} `;
  if (e.zone) s += `zone=${e.zone} `;
  if (e.use !== undefined) s += `use=${e.use} `;
  if (opts.id) s += `id=${e.id} `;
  return s.trimEnd();
}
