// `clbprobe cleanup`: removes the cls_bpf filters a SIGKILLed agent leaves on kernels before 6.6 (no TCX), which
// nothing removes once the DaemonSet is gone, and the clsact qdisc only where no other filter remains, since a CNI
// (Cilium, Calico eBPF) may share that qdisc.
import { dumpAddresses } from '../kernel/addresses.js';
import { MessageWriter, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST } from '../kernel/netlink/codec.js';
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
export function decodeTcmsg(payload: Buffer): { ifindex: number; handle: number; parent: number; kind?: string } {
  if (payload.length < TCMSG_LEN) throw new Error(`tcmsg of ${payload.length} bytes, expected at least ${TCMSG_LEN}`);
  const out: { ifindex: number; handle: number; parent: number; kind?: string } = {
    ifindex: payload.readInt32LE(4),
    handle: payload.readUInt32LE(8),
    parent: payload.readUInt32LE(12),
  };
  for (let off = TCMSG_LEN; off + 4 <= payload.length; ) {
    const len = payload.readUInt16LE(off);
    const type = payload.readUInt16LE(off + 2) & 0x3fff;
    if (len < 4 || off + len > payload.length) break;
    if (type === TCA_KIND) out.kind = payload.toString('latin1', off + 4, off + len).replace(/\0+$/, '');
    off += (len + 3) & ~3;
  }
  return out;
}

async function hasClsact(sock: NetlinkSocket, ifindex: number): Promise<boolean> {
  let found = false;
  await sock.dump(
    tcmsg(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, ifindex, 0).finish(),
    'rtnetlink: dump qdiscs',
    (msgs) => {
      for (const m of msgs) {
        if (m.type !== RTM_NEWQDISC) continue;
        const q = decodeTcmsg(m.payload);
        if (q.ifindex === ifindex && q.kind === 'clsact') found = true;
      }
    },
  );
  return found;
}

/** Messages describing filters on one clsact hook (a filter shows as its chain's head and as itself). */
async function filterCount(sock: NetlinkSocket, ifindex: number, parent: number): Promise<number> {
  let n = 0;
  await sock.dump(
    tcmsg(RTM_GETTFILTER, NLM_F_REQUEST | NLM_F_DUMP, ifindex, parent).finish(),
    'rtnetlink: dump tc filters',
    (msgs) => {
      for (const m of msgs) if (m.type === RTM_NEWTFILTER && decodeTcmsg(m.payload).ifindex === ifindex) n++;
    },
  );
  return n;
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
      if (!(await hasClsact(sock, itf.index))) continue;
      const removedFilters = removeTcLeftovers(
        addon,
        { ifname: itf.name, ...(o.netnsPath ? { netnsPath: o.netnsPath } : {}) },
        o.log,
      );
      if (!removedFilters) continue;
      const otherFilters =
        (await filterCount(sock, itf.index, CLSACT_INGRESS)) + (await filterCount(sock, itf.index, CLSACT_EGRESS));
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
