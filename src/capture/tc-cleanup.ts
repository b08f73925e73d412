// `clbprobe cleanup`: removes the cls_bpf filters a SIGKILLed agent leaves on kernels before 6.6 (no TCX), which
// nothing removes once the DaemonSet is gone, and the clsact qdisc only where no other filter remains, since a CNI
// (Cilium, Calico eBPF) may share that qdisc.
import { dumpAddresses } from '../kernel/addresses.js';
import {
  attrTable,
  MessageWriter,
  NLM_F_ACK,
  NLM_F_DUMP,
  NLM_F_REQUEST,
  needLen,
  readCString,
} from '../kernel/netlink/codec.js';
import { NETLINK_ROUTE, NetlinkError, NetlinkSocket } from '../kernel/netlink/socket.js';
import type { Logger } from '../log.js';
import type { BpfAddon } from '../native/bpf.js';
import { removeTcLeftovers } from './attach.js';

const RTM_DELQDISC = 37;
const RTM_GETQDISC = 38;
const RTM_NEWQDISC = 36;
const RTM_GETTFILTER = 46;
const RTM_NEWTFILTER = 44;
const TCA_KIND = 1;
/** struct tcmsg: family, pad, pad, ifindex, handle, parent, info. */
const TCMSG_LEN = 20;
/** TC_H_CLSACT, and its two hooks TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS / TC_H_MIN_EGRESS). */
const TC_H_CLSACT = 0xfffffff1;
const CLSACT_INGRESS = 0xfffffff2;
const CLSACT_EGRESS = 0xfffffff3;
const CLSACT_HANDLE = 0xffff0000;

export interface InterfaceCleanup {
  ifname: string;
  removedFilters: number;
  /** Filters of others left on the clsact qdisc (ingress + egress). */
  otherFilters: number;
  /** Whether the clsact qdisc was deleted (it held nothing else). */
  qdiscDeleted: boolean;
}

function tcmsg(type: number, flags: number, ifindex: number, parent: number, handle = 0): MessageWriter {
  return new MessageWriter(type, flags).u8(0).u8(0).u16(0).u32(ifindex).u32(handle).u32(parent).u32(0);
}

/** One tcmsg reply: its interface, handle, parent and TCA_KIND. */
export function decodeTcmsg(payload: Buffer) {
  needLen(payload.length, TCMSG_LEN, 'tcmsg', 0);
  const kind = attrTable(payload, TCMSG_LEN, payload.length).get(TCA_KIND);
  return {
    ifindex: payload.readInt32LE(4),
    handle: payload.readUInt32LE(8),
    parent: payload.readUInt32LE(12),
    kind: kind && readCString(payload, ...kind),
  };
}

const DUMPS = {
  qdiscs: { get: RTM_GETQDISC, reply: RTM_NEWQDISC, what: 'rtnetlink: dump qdiscs' },
  filters: { get: RTM_GETTFILTER, reply: RTM_NEWTFILTER, what: 'rtnetlink: dump tc filters' },
};

/** An interface's qdiscs, or filters on clsact hook `parent` (a filter shows as its chain's head and as itself). */
async function dumpTc(sock: NetlinkSocket, what: keyof typeof DUMPS, ifindex: number, parent = 0) {
  const d = DUMPS[what];
  const found: ReturnType<typeof decodeTcmsg>[] = [];
  await sock.dump(tcmsg(d.get, NLM_F_REQUEST | NLM_F_DUMP, ifindex, parent).finish(), d.what, (msgs) => {
    for (const m of msgs) {
      const tc = m.type === d.reply ? decodeTcmsg(m.payload) : undefined;
      if (tc?.ifindex === ifindex) found.push(tc);
    }
  });
  return found;
}

/** Removes our leftover filters from `ifname` (or every interface) and an emptied clsact; reports per interface. */
export async function cleanupTc(
  addon: BpfAddon,
  o: { ifname?: string; netnsPath?: string; log?: Logger } = {},
): Promise<InterfaceCleanup[]> {
  const sock = NetlinkSocket.open(NETLINK_ROUTE, o.netnsPath ? { netns: o.netnsPath } : {});
  try {
    const { interfaces } = await dumpAddresses(sock);
    const chosen = o.ifname ? interfaces.filter((i) => i.name === o.ifname) : interfaces;
    if (o.ifname && !chosen.length) throw new Error(`no interface ${o.ifname}`);
    const done: InterfaceCleanup[] = [];
    for (const itf of chosen) {
      if (!(await dumpTc(sock, 'qdiscs', itf.index)).some((q) => q.kind === 'clsact')) continue;
      const removedFilters = removeTcLeftovers(addon, { ifname: itf.name, netnsPath: o.netnsPath }, o.log);
      if (!removedFilters) continue;
      const otherFilters =
        (await dumpTc(sock, 'filters', itf.index, CLSACT_INGRESS)).length +
        (await dumpTc(sock, 'filters', itf.index, CLSACT_EGRESS)).length;
      let qdiscDeleted = false;
      if (otherFilters === 0) {
        const del = tcmsg(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, itf.index, TC_H_CLSACT, CLSACT_HANDLE)
          .attrString(TCA_KIND, 'clsact')
          .finish();
        try {
          await sock.request(del, `rtnetlink: delete the clsact qdisc of ${itf.name}`);
          qdiscDeleted = true;
        } catch (e) {
          // Someone else deleted it meanwhile.
          if (!(e instanceof NetlinkError && (e.errno === 2 || e.errno === 22))) throw e;
        }
      }
      o.log?.info({ ifname: itf.name, removedFilters, otherFilters, qdiscDeleted }, 'cleaned up tc leftovers');
      done.push({ ifname: itf.name, removedFilters, otherFilters, qdiscDeleted });
    }
    return done;
  } finally {
    sock.close();
  }
}
