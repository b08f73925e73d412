// Combines partial IPVS snapshots: each ipvsadm output lists what it lacks in `missing`, and merging takes each field
// group from the first snapshot that has it, matching services and real servers by identity.
import type { IpvsRealServer, IpvsSnapshot, IpvsStats, IpvsVirtualServer } from '../types.js';

/** Field groups as they appear or not in the various ipvsadm outputs. */
export const ALL_GROUPS = [
  'config', // scheduler, flags, persistence timeout, netmask, PE
  'forward',
  'weight',
  'conns', // active + inactive connections
  'persistentConns',
  'thresholds',
  'tunnel',
  'stats', // conns, packets, bytes
  'rates', // cps, pps, bps
] as const;
export type IpvsFieldGroup = (typeof ALL_GROUPS)[number];

const COUNTERS = ['conns', 'inPkts', 'outPkts', 'inBytes', 'outBytes'] as const;
const RATES = ['cps', 'inPps', 'outPps', 'inBps', 'outBps'] as const;

export function serviceKey(vs: IpvsVirtualServer): string {
  return vs.fwmark !== undefined ? `FWM ${vs.family} ${vs.fwmark}` : `${vs.protocol} ${vs.address} ${vs.port}`;
}

export function realServerKey(rs: IpvsRealServer): string {
  return `${rs.address} ${rs.port}`;
}

export function zeroStats(): IpvsStats {
  return { conns: 0, inPkts: 0, outPkts: 0, inBytes: 0, outBytes: 0, cps: 0, inPps: 0, outPps: 0, inBps: 0, outBps: 0 };
}

function copyStats(to: { stats?: IpvsStats }, from: { stats?: IpvsStats }, keys: readonly (keyof IpvsStats)[]): void {
  if (!from.stats) return;
  to.stats ??= zeroStats();
  for (const k of keys) to.stats[k] = from.stats[k];
}

type Copier = {
  vs?: (to: IpvsVirtualServer, from: IpvsVirtualServer) => void;
  rs?: (to: IpvsRealServer, from: IpvsRealServer) => void;
};

const COPY: Record<IpvsFieldGroup, Copier> = {
  config: {
    vs: (to, from) => {
      to.scheduler = from.scheduler;
      to.flags = [...from.flags];
      to.timeoutS = from.timeoutS;
      if (from.netmask !== undefined) to.netmask = from.netmask;
      if (from.peName !== undefined) to.peName = from.peName;
    },
  },
  forward: {
    rs: (to, from) => {
      to.forward = from.forward;
    },
  },
  weight: {
    rs: (to, from) => {
      to.weight = from.weight;
    },
  },
  conns: {
    rs: (to, from) => {
      to.activeConns = from.activeConns;
      to.inactiveConns = from.inactiveConns;
    },
  },
  persistentConns: {
    rs: (to, from) => {
      to.persistentConns = from.persistentConns;
    },
  },
  thresholds: {
    rs: (to, from) => {
      if (from.upperThreshold !== undefined) to.upperThreshold = from.upperThreshold;
      if (from.lowerThreshold !== undefined) to.lowerThreshold = from.lowerThreshold;
    },
  },
  tunnel: {
    rs: (to, from) => {
      if (from.tunnel) to.tunnel = { ...from.tunnel };
      else delete to.tunnel;
    },
  },
  stats: { vs: (to, from) => copyStats(to, from, COUNTERS), rs: (to, from) => copyStats(to, from, COUNTERS) },
  rates: { vs: (to, from) => copyStats(to, from, RATES), rs: (to, from) => copyStats(to, from, RATES) },
};

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
    const { vs: copyVs, rs: copyRs } = COPY[group];
    for (const vs of from.virtualServers) {
      const to = services.get(serviceKey(vs))!;
      copyVs?.(to, vs);
      if (!copyRs) continue;
      const rmap = reals.get(to)!;
      for (const rs of vs.realServers) copyRs(rmap.get(realServerKey(rs))!, rs);
    }
  }
  const out: IpvsSnapshot = { virtualServers: [...services.values()] };
  if (missing.length) out.missing = missing;
  return out;
}
