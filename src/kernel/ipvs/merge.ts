// Combines partial IPVS snapshots: each ipvsadm output lists what it lacks in `missing`, and merging takes each field
// group from the first snapshot that has it, matching services and real servers by identity.
import type { IpvsRealServer, IpvsSnapshot, IpvsStats, IpvsVirtualServer } from '../types.js';
import { COUNTERS, RATES } from './uapi.js';

type Fields = {
  vs?: readonly (keyof IpvsVirtualServer)[];
  rs?: readonly (keyof IpvsRealServer)[];
  stats?: readonly (keyof IpvsStats)[];
};

/** Field groups as they appear or not in the various ipvsadm outputs, with the fields each one holds. */
const GROUP_FIELDS = {
  config: { vs: ['scheduler', 'flags', 'timeoutS', 'netmask', 'peName'] },
  forward: { rs: ['forward'] },
  weight: { rs: ['weight'] },
  conns: { rs: ['activeConns', 'inactiveConns'] },
  persistentConns: { rs: ['persistentConns'] },
  thresholds: { rs: ['upperThreshold', 'lowerThreshold'] },
  tunnel: { rs: ['tunnel'] },
  stats: { stats: COUNTERS },
  rates: { stats: RATES },
} satisfies Record<string, Fields>;
export type IpvsFieldGroup = keyof typeof GROUP_FIELDS;
export const ALL_GROUPS = Object.keys(GROUP_FIELDS) as IpvsFieldGroup[];

export function serviceKey(vs: IpvsVirtualServer): string {
  return vs.fwmark !== undefined ? `FWM ${vs.family} ${vs.fwmark}` : `${vs.protocol} ${vs.address} ${vs.port}`;
}

export function realServerKey(rs: IpvsRealServer): string {
  return `${rs.address} ${rs.port}`;
}

export function zeroStats(): IpvsStats {
  return { conns: 0, inPkts: 0, outPkts: 0, inBytes: 0, outBytes: 0, cps: 0, inPps: 0, outPps: 0, inBps: 0, outBps: 0 };
}

/** Copies `keys` (arrays and objects as copies, absent ones deleted) and the `stats` counters from one entity. */
function copyFields(to: object, from: object, keys: readonly string[] = [], stats: Fields['stats'] = []): void {
  const t = to as Record<string, unknown> & { stats?: IpvsStats };
  const f = from as Record<string, unknown> & { stats?: IpvsStats };
  for (const k of keys) {
    const v = f[k];
    if (v === undefined) delete t[k];
    else t[k] = Array.isArray(v) ? [...v] : typeof v === 'object' ? { ...v } : v;
  }
  if (!f.stats || stats.length === 0) return;
  t.stats ??= zeroStats();
  for (const k of stats) t.stats[k] = f.stats[k];
}

function shell(vs: IpvsVirtualServer): IpvsVirtualServer {
  const {
    stats: _s,
    realServers: _r,
    scheduler: _c,
    flags: _f,
    timeoutS: _t,
    netmask: _n,
    peName: _p,
    ...identity
  } = vs;
  return { ...identity, scheduler: '', flags: [], timeoutS: 0, realServers: [] };
}

/** A real server with no connections counted; family only when it differs from its service's. */
export function newRealServer(
  { address, port, family }: Pick<IpvsRealServer, 'address' | 'port' | 'family'>,
  weight = 0,
  forward: IpvsRealServer['forward'] = 'masq',
): IpvsRealServer {
  const rs: IpvsRealServer = { address, port, weight, forward, activeConns: 0, inactiveConns: 0, persistentConns: 0 };
  if (family !== undefined) rs.family = family;
  return rs;
}

/** One snapshot with each field group taken from the first part that has it; `missing` lists groups none had. */
export function mergeIpvsSnapshots(parts: IpvsSnapshot[]): IpvsSnapshot {
  const services = new Map<string, IpvsVirtualServer>();
  const reals = new Map<IpvsVirtualServer, Map<string, IpvsRealServer>>();
  for (const part of parts) {
    for (const vs of part.virtualServers) {
      let to = services.get(serviceKey(vs));
      if (!to) {
        to = shell(vs);
        services.set(serviceKey(vs), to);
        reals.set(to, new Map());
      }
      const rmap = reals.get(to)!;
      for (const rs of vs.realServers) {
        if (!rmap.has(realServerKey(rs))) {
          const r = newRealServer(rs, 0, rs.forward);
          rmap.set(realServerKey(rs), r);
          to.realServers.push(r);
        }
      }
    }
  }
  const missing: IpvsFieldGroup[] = [];
  for (const group of ALL_GROUPS) {
    const from = parts.find((p) => !(p.missing ?? []).includes(group));
    if (!from) {
      missing.push(group);
      continue;
    }
    const fields: Fields = GROUP_FIELDS[group];
    for (const vs of from.virtualServers) {
      const to = services.get(serviceKey(vs))!;
      copyFields(to, vs, fields.vs, fields.stats);
      const rmap = reals.get(to)!;
      for (const rs of vs.realServers) copyFields(rmap.get(realServerKey(rs))!, rs, fields.rs, fields.stats);
    }
  }
  const out: IpvsSnapshot = { virtualServers: [...services.values()] };
  if (missing.length) out.missing = missing;
  return out;
}
