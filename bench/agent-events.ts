// Paced conntrack events for bench/agent.ts: creates entries over ctnetlink
// and deletes each one ~100 ms later, so the kernel emits one NEW and one
// DESTROY event per entry at a steady rate. A share of the entries goes to LB
// VIPs: the agent keeps those and counts each one in
// clbprobe_conntrack_flows_total when its DESTROY arrives, which is how the
// benchmark checks that no event was lost.
import * as C from '../src/kernel/conntrack/constants.js';
import { NETLINK_NETFILTER, NetlinkSocket } from '../src/kernel/netlink/socket.js';
import { native } from '../src/native/index.js';
import { entryMessage, type Destination } from './conntrack-dump.js';

export interface EventRun {
  /** Events the kernel was asked to emit (NEW + DESTROY). */
  events: number;
  /** Entries (each one NEW + one DESTROY) towards an LB VIP. */
  vipEntries: number;
  seconds: number;
}

const TICK_MS = 10;
const DELETE_AFTER_MS = 100;
/** Entry numbers above the ones bench/agent fills the table with, so tuples never collide. */
const FIRST_ID = 4_000_000;

/** A CT_DELETE for entry i: the CT_NEW message with its type changed (the kernel reads only the original tuple). */
function deleteMessage(i: number, to: Destination): Buffer {
  const m = entryMessage(i, to);
  m.writeUInt16LE((C.NFNL_SUBSYS_CTNETLINK << 8) | C.IPCTNL_MSG_CT_DELETE, 4);
  return m;
}

/**
 * Emits `rate` events per second for `seconds` in netns (a path): half NEW, half DESTROY.
 * Every `vipEvery`-th entry goes to `vip(i)`, the others to an address no Service uses.
 */
export async function paceEvents(netns: string, rate: number, seconds: number, vipEvery: number, vip: Destination): Promise<EventRun> {
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
  const t0 = performance.now();
  try {
    for (;;) {
      const now = performance.now();
      const elapsed = (now - t0) / 1000;
      const done = elapsed >= seconds;
      const create = done ? 0 : Math.floor((elapsed * rate) / 2) - (next - FIRST_ID);
      const msgs: Buffer[] = [];
      for (let k = 0; k < create; k++, next++) {
        msgs.push(entryMessage(next, to));
        live.push({ i: next, at: now });
        if (next % vipEvery === 0) vipEntries++;
      }
      let gone = 0;
      while (gone < live.length && (done || now - live[gone]!.at >= DELETE_AFTER_MS)) msgs.push(deleteMessage(live[gone++]!.i, to));
      live.splice(0, gone);
      send(msgs);
      events += msgs.length;
      if (done) return { events, vipEntries, seconds: (performance.now() - t0) / 1000 };
      await new Promise((r) => setTimeout(r, TICK_MS));
    }
  } finally {
    sock.close();
  }
}
