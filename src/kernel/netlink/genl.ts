// Generic netlink: family lookup through the "nlctrl" controller.
import { MessageWriter, NLM_F_ACK, NLM_F_REQUEST, walkAttrs } from './codec.js';
import { NETLINK_GENERIC, NetlinkError, NetlinkSocket } from './socket.js';

const GENL_ID_CTRL = 0x10;
export const GENL_HDRLEN = 4;
const CTRL_CMD_GETFAMILY = 3;
const CTRL_ATTR_FAMILY_ID = 1;
const CTRL_ATTR_FAMILY_NAME = 2;
const ENOENT = 2;

/** genl request: nlmsghdr + genlmsghdr {cmd, version, reserved}. */
export function genlMessage(familyId: number, flags: number, cmd: number, version: number): MessageWriter {
  return new MessageWriter(familyId, flags).u8(cmd).u8(version).u16(0);
}

/** A family's id by name; undefined when the kernel has no such family (e.g. IPVS not loaded). */
export async function resolveFamily(sock: NetlinkSocket, name: string): Promise<number | undefined> {
  const req = genlMessage(GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, CTRL_CMD_GETFAMILY, 1)
    .attrString(CTRL_ATTR_FAMILY_NAME, name)
    .finish();
  let replies: Awaited<ReturnType<typeof sock.request>>;
  try {
    replies = await sock.request(req, `genl: resolve family ${name}`);
  } catch (e) {
    if (e instanceof NetlinkError && e.errno === ENOENT) return undefined;
    throw e;
  }
  for (const m of replies) {
    let id = 0;
    walkAttrs(m.payload, GENL_HDRLEN, m.payload.length, (type, s) => {
      if (type === CTRL_ATTR_FAMILY_ID) id = m.payload.readUInt16LE(s);
    });
    if (id) return id;
  }
  return undefined;
}

export function openGenl(netns?: string): NetlinkSocket {
  return NetlinkSocket.open(NETLINK_GENERIC, netns ? { netns } : {});
}
