// Packets through one interface (received and sent), from its rtnetlink link
// statistics. The eBPF programs run on every one of them, so these counts are
// what the counter reports as packets looked at, without the programs paying
// for a map write per packet.
//
// The read is synchronous: rtnetlink answers a single-link RTM_GETLINK inside
// the sendmsg() call, so the reply is queued by the time nlSend returns.
import { native } from '../native/index.js';
import { MessageWriter, needLen, NLM_F_REQUEST, NLMSG_ERROR, splitMessages, walkAttrs } from '../kernel/netlink/codec.js';
import { NETLINK_ROUTE, NetlinkError } from '../kernel/netlink/socket.js';

const RTM_NEWLINK = 16;
const RTM_GETLINK = 18;
const IFINFOMSG_LEN = 16;
const IFLA_IFNAME = 3;
const IFLA_STATS64 = 23;
const IFLA_EXT_MASK = 29;
/** A link message without VF or extended info is ~1.5 KiB. */
const REPLY_BYTES = 16 << 10;

export interface PacketCounts {
  ingress: number;
  egress: number;
}

/**
 * rx/tx packets (struct rtnl_link_stats64's first two u64s) of an RTM_NEWLINK payload; undefined
 * without IFLA_STATS64. Malformed input throws NetlinkParseError.
 */
export function decodeLinkPackets(payload: Buffer): PacketCounts | undefined {
  let out: PacketCounts | undefined;
  needLen(payload.length, IFINFOMSG_LEN, 'ifinfomsg', 0);
  walkAttrs(payload, IFINFOMSG_LEN, payload.length, (type, s, e) => {
    if (type !== IFLA_STATS64) return;
    needLen(e - s, 16, 'IFLA_STATS64', s);
    out = { ingress: Number(payload.readBigUInt64LE(s)), egress: Number(payload.readBigUInt64LE(s + 8)) };
  });
  return out;
}

export class LinkPackets {
  private readonly request: Buffer;
  private readonly reply = Buffer.allocUnsafe(REPLY_BYTES);
  private readonly status = new Int32Array(2 + 8);
  private readonly base: PacketCounts;
  private seq = 1;
  private fd: number;

  private constructor(
    fd: number,
    readonly ifname: string,
  ) {
    this.fd = fd;
    const w = new MessageWriter(RTM_GETLINK, NLM_F_REQUEST);
    for (let i = 0; i < IFINFOMSG_LEN; i++) w.u8(0);
    w.attr(IFLA_IFNAME, Buffer.from(`${ifname}\0`));
    w.attrU32(IFLA_EXT_MASK, 0);
    this.request = w.finish();
    this.base = this.total();
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

  /** Packets since open. */
  read(): PacketCounts {
    const t = this.total();
    return { ingress: t.ingress - this.base.ingress, egress: t.egress - this.base.egress };
  }

  close(): void {
    if (this.fd < 0) return;
    native().nlClose(this.fd);
    this.fd = -1;
  }

  private total(): PacketCounts {
    if (this.fd < 0) throw new Error('link packet counts already closed');
    const n = native();
    const seq = (this.seq = (this.seq + 1) >>> 0 || 1);
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
          if (m.type === NLMSG_ERROR) throw new NetlinkError(-m.payload.readInt32LE(0), `rtnetlink: link ${this.ifname}`);
          if (m.type !== RTM_NEWLINK) continue;
          const c = decodeLinkPackets(m.payload);
          if (!c) throw new Error(`rtnetlink: link ${this.ifname} without IFLA_STATS64`);
          return c;
        }
        at = end;
      }
    }
  }
}
