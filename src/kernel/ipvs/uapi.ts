// IPVS generic netlink numbers (include/uapi/linux/ip_vs.h) and their names, shared by the netlink reader and the
// ipvsadm text parser so both produce identical snapshots.

export const IPVS_GENL_NAME = 'IPVS';
export const IPVS_GENL_VERSION = 1;

export const IPVS_CMD_GET_SERVICE = 4;
export const IPVS_CMD_GET_DEST = 8;

export const IPVS_CMD_ATTR_SERVICE = 1;
export const IPVS_CMD_ATTR_DEST = 2;

export const IPVS_SVC_ATTR_AF = 1;
export const IPVS_SVC_ATTR_PROTOCOL = 2;
export const IPVS_SVC_ATTR_ADDR = 3;
export const IPVS_SVC_ATTR_PORT = 4;
export const IPVS_SVC_ATTR_FWMARK = 5;
export const IPVS_SVC_ATTR_SCHED_NAME = 6;
export const IPVS_SVC_ATTR_FLAGS = 7;
export const IPVS_SVC_ATTR_TIMEOUT = 8;
export const IPVS_SVC_ATTR_NETMASK = 9;
export const IPVS_SVC_ATTR_STATS = 10;
export const IPVS_SVC_ATTR_PE_NAME = 11;
export const IPVS_SVC_ATTR_STATS64 = 12;

export const IPVS_DEST_ATTR_ADDR = 1;
export const IPVS_DEST_ATTR_PORT = 2;
export const IPVS_DEST_ATTR_FWD_METHOD = 3;
export const IPVS_DEST_ATTR_WEIGHT = 4;
export const IPVS_DEST_ATTR_U_THRESH = 5;
export const IPVS_DEST_ATTR_L_THRESH = 6;
export const IPVS_DEST_ATTR_ACTIVE_CONNS = 7;
export const IPVS_DEST_ATTR_INACT_CONNS = 8;
export const IPVS_DEST_ATTR_PERSIST_CONNS = 9;
export const IPVS_DEST_ATTR_STATS = 10;
export const IPVS_DEST_ATTR_ADDR_FAMILY = 11;
export const IPVS_DEST_ATTR_STATS64 = 12;

export const COUNTERS = ['conns', 'inPkts', 'outPkts', 'inBytes', 'outBytes'] as const;
export const RATES = ['cps', 'inPps', 'outPps', 'inBps', 'outBps'] as const;
/** Stats fields in IPVS_STATS_ATTR_* order: attribute i + 1 is STATS_KEYS[i]. */
export const STATS_KEYS = [...COUNTERS, ...RATES];
export const IPVS_DEST_ATTR_TUN_TYPE = 13;
export const IPVS_DEST_ATTR_TUN_PORT = 14;
export const IPVS_DEST_ATTR_TUN_FLAGS = 15;

export { AF_INET, AF_INET6 } from '../../model/address-family.js';

import type { IpFamily } from '../../model/address-family.js';

const IP_VS_SVC_F_PERSISTENT = 0x1;
const IP_VS_SVC_F_ONEPACKET = 0x4;
const IP_VS_SVC_F_SCHED1 = 0x8;
const IP_VS_SVC_F_SCHED2 = 0x10;
const IP_VS_SVC_F_SCHED3 = 0x20;

export const IP_VS_CONN_F_FWD_MASK = 0x7;

/** IP_VS_CONN_F_* forwarding methods (conn_flags & IP_VS_CONN_F_FWD_MASK) by number. */
export const FORWARDS = ['masq', 'local', 'tunnel', 'route', 'bypass'] as const;
/** A forwarding method as ipvsadm prints it: capitalised (Masq, Local, Tunnel, Route, Bypass). */
export const forwardName = (f: (typeof FORWARDS)[number]): string => f[0]!.toUpperCase() + f.slice(1);

/** Names of the service flags; scheduler flags are named the way ipvsadm names them for that scheduler. */
export function serviceFlagNames(flags: number, scheduler: string): string[] {
  const out: string[] = [];
  if (flags & IP_VS_SVC_F_PERSISTENT) out.push('persistent');
  if (flags & IP_VS_SVC_F_ONEPACKET) out.push('one-packet');
  const named = scheduler === 'sh' || scheduler === 'mh';
  const sched: [number, string][] = [
    [IP_VS_SVC_F_SCHED1, named ? `${scheduler}-fallback` : 'flag-1'],
    [IP_VS_SVC_F_SCHED2, named ? `${scheduler}-port` : 'flag-2'],
    [IP_VS_SVC_F_SCHED3, 'flag-3'],
  ];
  for (const [bit, name] of sched) if (flags & bit) out.push(name);
  return out;
}

export const TUNNEL_TYPES = ['ipip', 'gue', 'gre'] as const;
/** IP_VS_TUNNEL_ENCAP_FLAG_* is a value, not a bit set: 0 none, 1 csum, 2 remcsum. */
export const TUNNEL_CHECKSUMS = ['nocsum', 'csum', 'remcsum'] as const;

/** The persistence netmask as ipvsadm prints it: dotted for IPv4, a prefix length for IPv6. */
export function defaultNetmask(family: IpFamily): string {
  return family === 4 ? '255.255.255.255' : '128';
}
