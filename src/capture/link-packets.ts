// Packets through one interface from its rtnetlink link statistics, which stand in for "packets looked at" so
// the eBPF programs need no map write per packet. The read is synchronous (the kernel answers a single-link
// RTM_GETLINK inside sendmsg), and the ifindex tells a re-created uplink (same name, counts from zero) apart.

import { constants as osConstants } from 'node:os';
import {
  MessageWriter,
  NLM_F_REQUEST,
  NLMSG_ERROR,
  needLen,
  splitMessages,
  walkAttrs,
} from '../kernel/netlink/codec.js';
import { NETLINK_ROUTE, NetlinkError } from '../kernel/netlink/socket.js';
import { native } from '../native/index.js';

const RTM_NEWLINK = 16;
const RTM_GETLINK = 18;
const IFINFOMSG_LEN = 16;
const IFLA_IFNAME = 3;
const IFLA_STATS64 = 23;
const IFLA_EXT_MASK = 29;
export const ENODEV = osConstants.errno.ENODEV;
/** A link message without VF or extended info is ~1.5 KiB. */
const REPLY_BYTES = 16 << 10;

export interface PacketCounts {
  ingress: number;
  egress: number;
}

/** An RTM_NEWLINK's ifindex, ARPHRD_* type and rx/tx packets (IFLA_STATS64's first two u64s; undefined without). */
export function decodeLink(payload: Buffer): { ifindex: number; type: number; totals: PacketCounts | undefined } {
  let totals: PacketCounts | undefined;
  needLen(payload.length, IFINFOMSG_LEN, 'ifinfomsg', 0);
  walkAttrs(payload, IFINFOMSG_LEN, payload.length, (type, s, e) => {
    if (type !== IFLA_STATS64) return;
    needLen(e - s, 16, 'IFLA_STATS64', s);
    totals = { ingress: Number(payload.readBigUInt64LE(s)), egress: Number(payload.readBigUInt64LE(s + 8)) };
  });
  return { ifindex: payload.readInt32LE(4), type: payload.readUInt16LE(2), totals };
}

/** An interface: its link type (ARPHRD_*) says what its frames start with, totals count since it was created. */
export type LinkNow = { ifindex: number; type: number; totals: PacketCounts };

export class LinkPackets {
  private readonly request: Buffer;
  private readonly reply = Buffer.allocUnsafe(REPLY_BYTES);
  private readonly status = new Int32Array(2 + 8);
  /** The interface counted on, and its totals when counting on it began. */
  private followed: LinkNow;
  /** Packets counted on interfaces followed before this one. */
  private carried: PacketCounts = { ingress: 0, egress: 0 };
  /** What read() last returned: the packets counted until the interface followed went away. */
  lastRead: PacketCounts = { ingress: 0, egress: 0 };
  private seq = 1;
  private constructor(
    private fd: number,
    readonly ifname: string,
  ) {
    const w = new MessageWriter(RTM_GETLINK, NLM_F_REQUEST);
    for (let i = 0; i < IFINFOMSG_LEN; i++) w.u8(0);
    w.attr(IFLA_IFNAME, Buffer.from(`${ifname}\0`));
    w.attrU32(IFLA_EXT_MASK, 0);
    this.request = w.finish();
    const now = this.now();
    if (!now) throw new NetlinkError(ENODEV, `rtnetlink: link ${ifname}`);
    this.followed = now;
  }

  /** Opens a route socket (in netnsPath's namespace when given) and takes the counts now as zero. */
  static open(ifname: string, netnsPath?: string): LinkPackets {
    const n = native();
    const fd = n.nlOpen(NETLINK_ROUTE, netnsPath);
    try {
      n.nlBind(fd, 0);
      return new LinkPackets(fd, ifname);
    } catch (e) {
      n.nlClose(fd);
      throw e;
    }
  }

  get ifindex(): number {
    return this.followed.ifindex;
  }

  get type(): number {
    return this.followed.type;
  }

  /** Packets since open over every interface followed; undefined when the name no longer names the one followed. */
  read(): PacketCounts | undefined {
    const now = this.now();
    if (now?.ifindex !== this.followed.ifindex) return undefined;
    const base = this.followed.totals;
    this.lastRead = {
      ingress: this.carried.ingress + now.totals.ingress - base.ingress,
      egress: this.carried.egress + now.totals.egress - base.egress,
    };
    return this.lastRead;
  }

  /** Counts on from `now`, keeping the previous interface's counts as of the last read, so counts only grow. */
  follow(now: LinkNow): void {
    this.carried = this.lastRead;
    this.followed = now;
  }

  close(): void {
    if (this.fd < 0) return;
    native().nlClose(this.fd);
    this.fd = -1;
  }

  /** The interface that has the name now; undefined when none has (ENODEV). */
  now(): LinkNow | undefined {
    if (this.fd < 0) throw new Error('link packet counts already closed');
    const n = native();
    this.seq = (this.seq + 1) >>> 0 || 1;
    const seq = this.seq;
    this.request.writeUInt32LE(seq, 8);
    n.nlSend(this.fd, this.request);
    for (;;) {
      const count = n.nlRecv(this.fd, this.reply, this.status, REPLY_BYTES);
      if (count === 0) throw new Error(`rtnetlink: no answer about ${this.ifname}`);
      let at = 0;
      for (let i = 0; i < count; i++) {
        const end = at + this.status[2 + i]!;
        for (const m of splitMessages(this.reply, at, end)) {
          if (m.seq !== seq) continue; // an earlier, abandoned answer
          if (m.type === NLMSG_ERROR) {
            const errno = -m.payload.readInt32LE(0);
            if (errno === ENODEV) return undefined;
            throw new NetlinkError(errno, `rtnetlink: link ${this.ifname}`);
          }
          if (m.type !== RTM_NEWLINK) continue;
          const { ifindex, type, totals } = decodeLink(m.payload);
          if (!totals) throw new Error(`rtnetlink: link ${this.ifname} without IFLA_STATS64`);
          return { ifindex, type, totals };
        }
        at = end;
      }
    }
  }
}
