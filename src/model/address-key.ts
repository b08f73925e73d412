// The map key of address + protocol + port, and the one-or-more values kept under it: what the
// agent's Service index and the detectors' context both build over Service VIPs, NodePorts and
// endpoints.
import { ipv4Number } from './ip.js';

const PROTO_CODE: Record<string, number> = { TCP: 1, UDP: 2, SCTP: 3 };

/**
 * A number for IPv4 (32 + 2 + 16 bits fit a double exactly): at 20k endpoints, text keys hold
 * ~4 MB of heap as concatenated strings (bench/agent.ts). Text for IPv6 and anything unusual.
 * The '' address means any (NodePorts).
 */
export type Key = number | string;
export const key = (ip: string, proto: string, port: number | undefined): Key => {
  const n = ip === '' ? 0 : ipv4Number(ip);
  const p = PROTO_CODE[proto];
  if (n !== undefined && p !== undefined && port !== undefined) return (n * 4 + p) * 65536 + port;
  return `${ip}|${proto}|${port ?? ''}`;
};

/**
 * A map value: one value alone, or a list when several share the key. Nearly every key has one
 * Service port; a one-element list each would be ~1.5 MB at 20k endpoints (bench/agent.ts).
 */
export type OneOrMore<V extends object> = V | V[];

export function addTo<K, V extends object>(m: Map<K, OneOrMore<V>>, k: K, v: V): void {
  const a = m.get(k);
  if (a === undefined) m.set(k, v);
  else if (Array.isArray(a)) a.push(v);
  else m.set(k, [a, v]);
}

export const listOf = <V extends object>(v: OneOrMore<V> | undefined): V[] | undefined => (v === undefined || Array.isArray(v) ? v : [v]);
