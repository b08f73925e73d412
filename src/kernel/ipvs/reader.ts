// Reads the IPVS table over generic netlink: a GET_SERVICE dump, then a GET_DEST dump per service (the kernel lists
// real servers only per service); no IPVS or no CAP_NET_ADMIN is a status, corrupt replies throw NetlinkParseError.

import { isPermissionErrno, permissionDenied } from '../../model/permission.js';
import type { SourceStatus } from '../../model/source-status.js';
import { type NetlinkMessage, NLMSG_HDRLEN } from '../netlink/codec.js';
import { openGenl, resolveFamily } from '../netlink/genl.js';
import { NetlinkError } from '../netlink/socket.js';
import type { IpvsSnapshot, IpvsVirtualServer } from '../types.js';
import { decodeDest, decodeService, destDumpRequest, type ServiceSelector, serviceDumpRequest } from './decode.js';
import { IPVS_GENL_NAME } from './uapi.js';

export interface ReadIpvsOptions {
  /** Path of a network namespace (e.g. /var/run/netns/NAME); default: the caller's. */
  netns?: string;
  /** Gets a copy of every reply message with its header (e.g. to record fixtures) and its service's index. */
  onReply?: (kind: 'service' | 'dest', message: Buffer, serviceIndex: number) => void;
}

export interface IpvsReadResult {
  status: SourceStatus;
  snapshot?: IpvsSnapshot;
}

export async function readIpvs(opts: ReadIpvsOptions = {}): Promise<IpvsReadResult> {
  const started = performance.now();
  const status = (available: boolean, reason?: string, notPresent = false): SourceStatus => ({
    source: 'ipvs',
    available,
    ...(reason ? { reason } : {}),
    ...(notPresent ? { notPresent } : {}),
    durationMs: Math.round((performance.now() - started) * 1000) / 1000,
  });
  const sock = openGenl(opts.netns);
  try {
    const familyId = await resolveFamily(sock, IPVS_GENL_NAME);
    if (!familyId) {
      return {
        status: status(
          false,
          'IPVS: generic netlink family "IPVS" is not registered (kernel without IPVS, or ip_vs not loaded)',
          true,
        ),
      };
    }
    const record = opts.onReply;
    const found: { service: IpvsVirtualServer; selector: ServiceSelector }[] = [];
    await sock.dump(serviceDumpRequest(familyId), 'IPVS: dump services', (msgs) => {
      for (const m of msgs) {
        record?.('service', withHeader(m), found.length);
        found.push(decodeService(m.payload));
      }
    });
    for (const [i, { service, selector }] of found.entries()) {
      await sock.dump(destDumpRequest(familyId, selector), 'IPVS: dump real servers', (msgs) => {
        for (const m of msgs) {
          record?.('dest', withHeader(m), i);
          service.realServers.push(decodeDest(m.payload, service.family));
        }
      });
    }
    return { status: status(true), snapshot: { virtualServers: found.map((f) => f.service) } };
  } catch (e) {
    if (e instanceof NetlinkError && isPermissionErrno(e.code)) {
      return { status: status(false, permissionDenied('CAP_NET_ADMIN', `reading the IPVS table: ${e.code}`)) };
    }
    throw e;
  } finally {
    sock.close();
  }
}

/** The message as it was on the wire (its payload is a view that the next receive overwrites). */
function withHeader(msg: NetlinkMessage): Buffer {
  const b = Buffer.alloc(NLMSG_HDRLEN + msg.payload.length);
  b.writeUInt32LE(b.length, 0);
  b.writeUInt16LE(msg.type, 4);
  b.writeUInt16LE(msg.flags, 6);
  b.writeUInt32LE(msg.seq, 8);
  b.writeUInt32LE(msg.pid, 12);
  msg.payload.copy(b, NLMSG_HDRLEN);
  return b;
}
