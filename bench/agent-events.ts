// Paced conntrack events for bench/agent.ts: creates entries over ctnetlink
// and deletes each one ~100 ms later, so the kernel emits one NEW and one
// DESTROY event per entry at a steady rate. A share of the entries goes to LB
// VIPs: the agent keeps those and counts each one in
// clbprobe_conntrack_flows_total when its DESTROY arrives, which is how the
// benchmark checks that no event was lost.
// The kernel answers a CT_NEW it refuses with an NLMSG_ERROR even without
// NLM_F_ACK (e.g. ENOMEM when the namespace's table is at nf_conntrack_max,
// which is machine-wide and which another process may lower while a bench
// runs): those answers are read and counted, so a refused entry is never
// reported as created (it makes no event and nothing for the agent to count).
import { constants as osConstants } from 'node:os';
import * as C from '../src/kernel/conntrack/constants.js';
import { NLMSG_ERROR, splitMessages } from '../src/kernel/netlink/codec.js';
import { errnoName, NETLINK_NETFILTER, NetlinkSocket, parseError } from '../src/kernel/netlink/socket.js';
import { native } from '../src/native/index.js';
import { type Destination, entryMessage } from './conntrack-dump.js';

export interface EventRun {
  /** Events the kernel emitted (NEW + DESTROY of each entry it created; a refused entry makes none). */
  events: number;
  /** Entries (each one NEW + one DESTROY) towards an LB VIP, as asked of the kernel. */
  vipEntries: number;
  /** Of all entries / of the VIP entries, how many CT_NEWs the kernel refused (no event, nothing to count). */
  refused: number;
  vipRefused: number;
  /** The kernel's first refusal, e.g. "ENOMEM: ..." (the table is full), when there was one. */
  firstRefusal?: string;
  /** The socket's queue of error answers overflowed: refusals past it are not counted. */
  answersLost: boolean;
  seconds: number;
}

const TICK_MS = 10;
const DELETE_AFTER_MS = 100;
/** Entry numbers above the ones bench/agent fills the table with, so tuples never collide. */
const FIRST_ID = 4_000_000;

/** Sequence numbers: 2i for entry i's CT_NEW, 2i + 1 for its CT_DELETE, so that an error answer names both. */
function newMessage(i: number, to: Destination): Buffer {
  const m = entryMessage(i, to);
  m.writeUInt32LE(2 * i, 8);
  return m;
}

/** A CT_DELETE for entry i: the CT_NEW message with its type changed (the kernel reads only the original tuple). */
function deleteMessage(i: number, to: Destination): Buffer {
  const m = entryMessage(i, to);
  m.writeUInt16LE((C.NFNL_SUBSYS_CTNETLINK << 8) | C.IPCTNL_MSG_CT_DELETE, 4);
  m.writeUInt32LE(2 * i + 1, 8);
  return m;
}

const ENOBUFS = osConstants.errno.ENOBUFS;

/**
 * Emits `rate` events per second for `seconds` in netns (a path): half NEW, half DESTROY.
 * Every `vipEvery`-th entry goes to `vip(i)`, the others to an address no Service uses.
 */
export async function paceEvents(
  netns: string,
  rate: number,
  seconds: number,
  vipEvery: number,
  vip: Destination,
): Promise<EventRun> {
  const unrelated: Destination = () => ({ dst: Buffer.from([10, 200, 0, 2]), dport: 80 });
  const to: Destination = (i) => (i % vipEvery === 0 ? vip(i) : unrelated(i));
  const sock = NetlinkSocket.open(NETLINK_NETFILTER, { netns, rcvbuf: 1 << 20 });
  const send = (msgs: Buffer[]): void => {
    // One datagram per ~60 KB, as fill() does; no ACKs are asked for.
    for (let at = 0; at < msgs.length; ) {
      let bytes = 0;
      let end = at;
      while (end < msgs.length && bytes < 60_000) bytes += msgs[end++]!.length;
      native().nlSend(sock.fd, Buffer.concat(msgs.slice(at, end)));
      at = end;
    }
  };
  const live: { i: number; at: number }[] = [];
  let next = FIRST_ID;
  let events = 0;
  let vipEntries = 0;
  const refusals = { refused: 0, vipRefused: 0, firstRefusal: undefined as string | undefined, answersLost: false };
  const rbuf = Buffer.alloc(1 << 20);
  const status = new Int32Array(2 + 256);
  /** Reads the kernel's error answers queued so far (the kernel handles a send before it returns). */
  const drainAnswers = (): void => {
    for (;;) {
      const count = native().nlRecv(sock.fd, rbuf, status);
      if (count <= 0) {
        if (status[1] === ENOBUFS) refusals.answersLost = true;
        else return;
        continue;
      }
      let off = 0;
      for (let d = 0; d < count; d++) {
        const len = status[2 + d]!;
        for (const m of splitMessages(rbuf, off, off + len)) {
          if (m.type !== NLMSG_ERROR) continue;
          const err = parseError(m);
          // A refused entry's CT_DELETE fails too (ENOENT): only the CT_NEWs count.
          if (err.errno === 0 || m.seq % 2 === 1) continue;
          refusals.refused++;
          if ((m.seq / 2) % vipEvery === 0) refusals.vipRefused++;
          refusals.firstRefusal ??= `${errnoName(err.errno)}${err.message ? `: ${err.message}` : ''}`;
        }
        off += len;
      }
    }
  };
  const t0 = performance.now();
  try {
    for (;;) {
      const now = performance.now();
      const elapsed = (now - t0) / 1000;
      const done = elapsed >= seconds;
      const create = done ? 0 : Math.floor((elapsed * rate) / 2) - (next - FIRST_ID);
      const msgs: Buffer[] = [];
      for (let k = 0; k < create; k++, next++) {
        msgs.push(newMessage(next, to));
        live.push({ i: next, at: now });
        if (next % vipEvery === 0) vipEntries++;
      }
      let gone = 0;
      while (gone < live.length && (done || now - live[gone]!.at >= DELETE_AFTER_MS))
        msgs.push(deleteMessage(live[gone++]!.i, to));
      live.splice(0, gone);
      send(msgs);
      drainAnswers();
      events += msgs.length;
      if (done)
        return {
          events: events - 2 * refusals.refused,
          vipEntries,
          ...refusals,
          seconds: (performance.now() - t0) / 1000,
        };
      await new Promise((r) => setTimeout(r, TICK_MS));
    }
  } finally {
    sock.close();
  }
}
