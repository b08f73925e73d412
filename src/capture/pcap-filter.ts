// Kernel capture filters (pcap syntax) for the pcap counter: a superset of each direction's
// packets that are ours, so that only candidates reach user space, where classify.ts decides.
import { formatAddress16, parsePrefix16, type Targets } from './targets.js';

/** Matches nothing (protocol 255 is reserved), since libpcap refuses expressions it can prove empty. */
export const MATCH_NOTHING = 'ip proto 255';
/** When the precise filter is too large for the kernel: every candidate protocol. */
export const MATCH_PORT_PROTOCOLS = 'tcp or udp or sctp';

function localSources(t: Targets): string | undefined {
  const nets = new Set(
    t.localPrefixes.map((p) => {
      const { address, bits } = parsePrefix16(p.cidr);
      const text = formatAddress16(address);
      return `src net ${text}/${text.includes(':') ? bits : bits - 96}`;
    }),
  );
  return nets.size ? [...nets].join(' or ') : undefined;
}

/** Outbound: local source to a VIP (to_lb). */
export function egressFilter(t: Targets): string {
  const src = localSources(t);
  if (!src || t.vips.length === 0) return MATCH_NOTHING;
  const vips = new Set(
    t.vips.map((v) => {
      const host = `dst host ${formatAddress16(parsePrefix16(v.address).address)}`;
      return v.port === 0 ? `(${host} and ${v.proto})` : `(${host} and ${v.proto} dst port ${v.port})`;
    }),
  );
  return `(${src}) and (${[...vips].join(' or ')})`;
}

/** Inbound: any local source (loop_return, hc_local_src). */
export function ingressFilter(t: Targets): string {
  const src = localSources(t);
  if (!src) return MATCH_NOTHING;
  return `(${src}) and (${MATCH_PORT_PROTOCOLS})`;
}
