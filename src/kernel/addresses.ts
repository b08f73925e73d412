// The node's interfaces and addresses over rtnetlink, plus live address events; whether an LB IP is bound on
// kube-ipvs0 (kube-proxy IPVS mode) decides which loopback mechanism applies.

import { AF_INET, AF_INET6 } from '../model/address-family.js';
import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import type { SourceStatus } from '../model/source-status.js';
import { formatIP } from './ip.js';
import {
  MessageWriter,
  type NetlinkMessage,
  NetlinkParseError,
  NLM_F_DUMP,
  NLM_F_REQUEST,
  needLen,
  readCString,
  walkAttrs,
} from './netlink/codec.js';
import { NETLINK_ROUTE, NetlinkSocket, NOTIFICATION_BATCH } from './netlink/socket.js';
import { sourceFailure } from './source.js';
import type { AddressEvent, AddressSnapshot, InterfaceAddress, NetInterface } from './types.js';

const RTM_NEWLINK = 16;
const RTM_GETLINK = 18;
const RTM_NEWADDR = 20;
const RTM_DELADDR = 21;
const RTM_GETADDR = 22;
const IFINFOMSG_LEN = 16;
const IFADDRMSG_LEN = 8;
const IFLA_ADDRESS = 1;
const IFLA_IFNAME = 3;
const IFLA_MTU = 4;
const IFLA_MASTER = 10;
const IFLA_LINKINFO = 18;
const IFLA_INFO_KIND = 1;
const IFA_ADDRESS = 1;
const IFA_LOCAL = 2;
const IFA_LABEL = 3;
const IFA_FLAGS = 8;
const IFF_UP = 1;
const RTMGRP_IPV4_IFADDR = 0x10;
const RTMGRP_IPV6_IFADDR = 0x100;

/** IFA_F_* names; bit i is IFA_FLAG_NAMES[i]. */
export const IFA_FLAG_NAMES = [
  'secondary',
  'nodad',
  'optimistic',
  'dadfailed',
  'homeaddress',
  'deprecated',
  'tentative',
  'permanent',
  'mngtmpaddr',
  'noprefixroute',
  'autojoin',
  'stable-privacy',
] as const;

export const SCOPE_NAMES = new Map<number, InterfaceAddress['scope']>([
  [0, 'global'],
  [200, 'site'],
  [253, 'link'],
  [254, 'host'],
  [255, 'nowhere'],
]);

/** Decodes an RTM_NEWLINK payload. */
export function decodeLink(buf: Buffer): NetInterface {
  needLen(buf.length, IFINFOMSG_LEN, 'ifinfomsg', 0);
  const iface: NetInterface = {
    index: buf.readInt32LE(4),
    name: '',
    up: (buf.readUInt32LE(8) & IFF_UP) !== 0,
    mtu: 0,
    isKubeIpvs: false,
    addresses: [],
  };
  walkAttrs(buf, IFINFOMSG_LEN, buf.length, (type, s, e) => {
    switch (type) {
      case IFLA_IFNAME:
        iface.name = readCString(buf, s, e);
        break;
      case IFLA_MTU:
        needLen(e - s, 4, 'IFLA_MTU', s);
        iface.mtu = buf.readUInt32LE(s);
        break;
      case IFLA_ADDRESS:
        if (e - s === 6) iface.mac = [...buf.subarray(s, e)].map((x) => x.toString(16).padStart(2, '0')).join(':');
        break;
      case IFLA_MASTER:
        needLen(e - s, 4, 'IFLA_MASTER', s);
        iface.master = buf.readUInt32LE(s);
        break;
      case IFLA_LINKINFO:
        walkAttrs(buf, s, e, (t2, s2, e2) => {
          if (t2 === IFLA_INFO_KIND) iface.kind = readCString(buf, s2, e2);
        });
        break;
    }
  });
  iface.isKubeIpvs = iface.name === KUBE_IPVS_IFNAME;
  return iface;
}

/** Decodes an RTM_NEWADDR/RTM_DELADDR payload. */
export function decodeAddress(buf: Buffer): { ifindex: number; address: InterfaceAddress } {
  needLen(buf.length, IFADDRMSG_LEN, 'ifaddrmsg', 0);
  const fam = buf[0]!;
  if (fam !== AF_INET && fam !== AF_INET6) throw new NetlinkParseError(`address family ${fam}`, 0);
  const alen = fam === AF_INET ? 4 : 16;
  let flags = buf[2]!;
  let local: string | undefined;
  let addr: string | undefined;
  let label: string | undefined;
  walkAttrs(buf, IFADDRMSG_LEN, buf.length, (type, s, e) => {
    switch (type) {
      case IFA_LOCAL:
        needLen(e - s, alen, 'IFA_LOCAL', s);
        local = formatIP(buf, s, alen);
        break;
      case IFA_ADDRESS:
        needLen(e - s, alen, 'IFA_ADDRESS', s);
        addr = formatIP(buf, s, alen);
        break;
      case IFA_LABEL:
        label = readCString(buf, s, e);
        break;
      case IFA_FLAGS:
        needLen(e - s, 4, 'IFA_FLAGS', s);
        flags = buf.readUInt32LE(s); // supersedes the 8-bit ifa_flags
        break;
    }
  });
  // IPv4's IFA_LOCAL is the own address (IFA_ADDRESS is the point-to-point peer); IPv6 sends only IFA_ADDRESS.
  const address = local ?? addr;
  if (!address) throw new NetlinkParseError('address message without IFA_LOCAL/IFA_ADDRESS', IFADDRMSG_LEN);
  const out: InterfaceAddress = {
    family: fam === AF_INET ? 4 : 6,
    address,
    prefixLen: buf[1]!,
    scope: SCOPE_NAMES.get(buf[3]!) ?? buf[3]!,
    flags: IFA_FLAG_NAMES.filter((_, bit) => flags & (1 << bit)),
  };
  if (label !== undefined) out.label = label;
  return { ifindex: buf.readUInt32LE(4), address: out };
}

function dumpRequest(type: number, headerLen: number): Buffer {
  const w = new MessageWriter(type, NLM_F_REQUEST | NLM_F_DUMP);
  for (let i = 0; i < headerLen; i++) w.u8(0);
  return w.finish();
}

/** Sorts kube-ipvs0 first, then by index. */
export function interfaceOrder(a: NetInterface, b: NetInterface): number {
  return Number(b.isKubeIpvs) - Number(a.isKubeIpvs) || a.index - b.index;
}

/** What a dump of links and addresses needs of a socket (NetlinkSocket; a replay of recorded replies in tests). */
export type RouteDumper = Pick<NetlinkSocket, 'dump'>;

/** All interfaces with their addresses; `inconsistent` says why they may be incomplete even after retries. */
export interface AddressDump extends AddressSnapshot {
  inconsistent?: string;
}

/** Link and address dumps taken again when they disagree: a table changing under them is rare and short. */
const DUMP_ATTEMPTS = 3;

/** All interfaces with their addresses, both dumps redone while they changed underneath or disagree. */
export async function dumpAddresses(sock: RouteDumper): Promise<AddressDump> {
  for (let attempt = 1; ; attempt++) {
    const { interfaces, inconsistent } = await dumpLinksAndAddresses(sock);
    if (!inconsistent) return { interfaces };
    if (attempt === DUMP_ATTEMPTS) {
      return { interfaces, inconsistent: `${inconsistent} (${DUMP_ATTEMPTS} attempts); addresses may be missing` };
    }
  }
}

async function dumpLinksAndAddresses(sock: RouteDumper): Promise<AddressDump> {
  const byIndex = new Map<number, NetInterface>();
  const links = await sock.dump(dumpRequest(RTM_GETLINK, IFINFOMSG_LEN), 'rtnetlink: dump links', (msgs) => {
    for (const m of msgs) {
      if (m.type !== RTM_NEWLINK) continue;
      const l = decodeLink(m.payload);
      byIndex.set(l.index, l);
    }
  });
  const unknown = new Set<number>();
  const addrs = await sock.dump(dumpRequest(RTM_GETADDR, IFADDRMSG_LEN), 'rtnetlink: dump addresses', (msgs) => {
    for (const m of msgs) {
      if (m.type !== RTM_NEWADDR) continue;
      const a = decodeAddress(m.payload);
      const iface = byIndex.get(a.ifindex);
      if (iface) iface.addresses.push(a.address);
      else unknown.add(a.ifindex);
    }
  });
  const interfaces = [...byIndex.values()].sort(interfaceOrder);
  if (links.interrupted || addrs.interrupted) {
    return { interfaces, inconsistent: 'the link or address table changed during the dump (NLM_F_DUMP_INTR)' };
  }
  if (unknown.size > 0) {
    return {
      interfaces,
      inconsistent: `addresses of interfaces not in the link dump (index ${[...unknown].join(', ')})`,
    };
  }
  return { interfaces };
}

export async function readAddresses(
  opts: { netns?: string } = {},
): Promise<{ status: SourceStatus; snapshot?: AddressSnapshot }> {
  const t0 = performance.now();
  let sock: NetlinkSocket | undefined;
  try {
    sock = NetlinkSocket.open(NETLINK_ROUTE, opts.netns ? { netns: opts.netns } : {});
    const { inconsistent, ...snapshot } = await dumpAddresses(sock);
    const status: SourceStatus = {
      source: 'addresses',
      available: true,
      ...(inconsistent ? { reason: inconsistent } : {}),
      durationMs: performance.now() - t0,
    };
    return { status, snapshot };
  } catch (e) {
    return { status: sourceFailure('addresses', e, 'CAP_NET_ADMIN', t0) };
  } finally {
    sock?.close();
  }
}

/** An address notification as an event; undefined for other message types. */
function addressEvent(msg: NetlinkMessage): AddressEvent | undefined {
  if (msg.type !== RTM_NEWADDR && msg.type !== RTM_DELADDR) return undefined;
  const { ifindex, address } = decodeAddress(msg.payload);
  const kind = msg.type === RTM_NEWADDR ? 'add' : 'remove';
  return { kind, ifindex, ...(address.label !== undefined ? { ifname: address.label } : {}), address };
}

/** Live address events; onResync means the kernel dropped notifications and the caller should re-read. */
export function watchAddresses(
  onEvent: (e: AddressEvent) => void,
  onResync: () => void,
  opts: { netns?: string; onError?: (e: Error) => void } = {},
): () => void {
  const sock = NetlinkSocket.open(NETLINK_ROUTE, {
    ...NOTIFICATION_BATCH,
    groups: RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR,
    rcvbuf: 4 << 20,
    ...(opts.netns ? { netns: opts.netns } : {}),
  });
  const stop = sock.subscribe(
    (msgs) => {
      for (const m of msgs) {
        const ev = addressEvent(m);
        if (ev) onEvent(ev);
      }
    },
    onResync,
    opts.onError,
  );
  return () => {
    stop();
    sock.close();
  };
}
