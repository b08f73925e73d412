// The map key of address + protocol + port and the one-or-more values kept under it, as the agent's Service index
// and the detectors' context build them over VIPs, NodePorts and endpoints.
import { ipv4Number } from './ip.js';

const PROTO_CODE: Record<string, number> = { TCP: 1, UDP: 2, SCTP: 3 };

/** A number for IPv4 (32 + 2 + 16 bits fit a double exactly), else text; the '' address means any (NodePorts). */
export type Key = number | string;
export const key = (ip: string, proto: string, port: number | undefined): Key => {
  const n = ip === '' ? 0 : ipv4Number(ip);
  const p = PROTO_CODE[proto];
  if (n !== undefined && p !== undefined && port !== undefined) return (n * 4 + p) * 65536 + port;
  return `${ip}|${proto}|${port ?? ''}`;
};

/** A map value: one value alone, or a list when several share the key (nearly every key has one). */
export type OneOrMore<V extends object> = V | V[];

/** Adds value under key; returns what the key holds now. */
export function addTo<K, V extends object>(map: Map<K, OneOrMore<V>>, key: K, value: V): OneOrMore<V> {
  const held = map.get(key);
  if (Array.isArray(held)) {
    held.push(value);
    return held;
  }
  const now = held === undefined ? value : [held, value];
  map.set(key, now);
  return now;
}

export const listOf = <V extends object>(v: OneOrMore<V> | undefined): V[] | undefined =>
  v === undefined || Array.isArray(v) ? v : [v];

export function removeFrom<K, V extends object>(map: Map<K, OneOrMore<V>>, key: K, value: V): void {
  const held = map.get(key);
  if (held === value) map.delete(key);
  else if (Array.isArray(held)) {
    const rest = held.filter((v) => v !== value);
    map.set(key, rest.length === 1 ? rest[0]! : rest);
  }
}

/** key()'s matches in two levels, protocol + port then address, so IPv4 inner keys are integers kept inline. */
export class AddressPortMap<V extends object> {
  private readonly byPort = new Map<number | string, Map<number | string, OneOrMore<V>>>();

  add(ip: string, proto: string, port: number | undefined, v: V): void {
    const o = outerKey(proto, port);
    let inner = this.byPort.get(o);
    if (!inner) {
      inner = new Map();
      this.byPort.set(o, inner);
    }
    addTo(inner, innerKey(ip), v);
  }

  get(ip: string, proto: string, port: number | undefined): OneOrMore<V> | undefined {
    return this.byPort.get(outerKey(proto, port))?.get(innerKey(ip));
  }

  has(ip: string, proto: string, port: number | undefined): boolean {
    return this.get(ip, proto, port) !== undefined;
  }
}

const outerKey = (proto: string, port: number | undefined): number | string => {
  const p = PROTO_CODE[proto];
  return p !== undefined && port !== undefined ? p * 65536 + port : `${proto}|${port ?? ''}`;
};

/** `| 0`: the address as a signed 32-bit integer (one-to-one), which stays a Smi above 127.255.255.255 too. */
const innerKey = (ip: string): number | string => {
  const n = ipv4Number(ip);
  return n !== undefined ? n | 0 : ip;
};
