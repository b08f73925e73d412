// One malformed conntrack event among good ones, delivered by the real kernel to the agent's
// event socket: a root process in the namespace sends a datagram (recorded ctnetlink messages,
// test/fixtures/netlink/ctnetlink-dump.hex, the middle one with an attribute that overruns its
// message) to the socket's netlink port, as the kernel sends events. The events before and after
// are delivered, the bad one is counted in stats.malformed and handed to onMalformed, and the
// watch does not fail.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeEntry } from '../../src/kernel/conntrack/decode.js';
import { ConntrackWatch } from '../../src/kernel/conntrack/events.js';
import { NLMSG_DONE, NLMSG_HDRLEN, splitMessages } from '../../src/kernel/netlink/codec.js';
import type { ConntrackEvent } from '../../src/kernel/types.js';
import { isRoot, Netns } from '../support/netns.js';

const first = Buffer.from(
  readFileSync(join(import.meta.dirname, '../fixtures/netlink/ctnetlink-dump.hex'), 'utf8').split('\n')[0]!,
  'hex',
);
const entries = splitMessages(first)
  .filter((m) => m.type !== NLMSG_DONE)
  .map((m) => decodeEntry(m.payload));

/** The recorded datagram's entry messages, the one at `bad` with its first attribute claiming 65 KB. */
function datagram(bad: number): Buffer {
  const d = Buffer.from(first);
  let i = 0;
  let end = 0;
  for (let o = 0; o < d.length; o += (d.readUInt32LE(o) + 3) & ~3) {
    if (d.readUInt16LE(o + 4) === NLMSG_DONE) break;
    if (i++ === bad) d.writeUInt16LE(0xfff0, o + NLMSG_HDRLEN + 4);
    end = o + ((d.readUInt32LE(o) + 3) & ~3);
  }
  return d.subarray(0, end);
}

/** Netlink ports of the NETLINK_NETFILTER sockets in ns that joined multicast groups (event sockets). */
function eventPorts(ns: Netns): number[] {
  return ns
    .run('cat', '/proc/net/netlink')
    .split('\n')
    .slice(1)
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f[1] === '12' && f[3] && /^[0-9a-f]+$/.test(f[3]) && parseInt(f[3], 16) !== 0)
    .map((f) => Number(f[2]));
}

const SEND =
  'import socket,sys\ns=socket.socket(socket.AF_NETLINK,socket.SOCK_RAW,12)\ns.bind((0,0))\ns.sendto(bytes.fromhex(sys.argv[2]),(int(sys.argv[1]),0))';

describe.skipIf(!isRoot)('a malformed conntrack event (real kernel delivery, namespace cbc2-*)', () => {
  let ns: Netns;
  beforeAll(() => {
    ns = Netns.create('cbc2-ev');
  });
  afterAll(() => ns?.delete());

  it('delivers the events before and after it, counts it, and does not fail the watch', async () => {
    const seen: ConntrackEvent[] = [];
    const malformed: string[] = [];
    const errors: Error[] = [];
    const w = new ConntrackWatch({
      netns: ns.path,
      onEvent: (e) => void seen.push(e),
      onMalformed: (e) => void malformed.push(e.message),
      onError: (e) => void errors.push(e),
    });
    try {
      const ports = eventPorts(ns);
      expect(ports).toHaveLength(1);
      execFileSync('ip', [
        'netns',
        'exec',
        ns.name,
        'python3',
        '-c',
        SEND,
        String(ports[0]),
        datagram(1).toString('hex'),
      ]);
      const deadline = Date.now() + 5000;
      while (seen.length < entries.length - 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(errors).toEqual([]);
      expect(seen.map((e) => e.entry)).toEqual([entries[0], ...entries.slice(2)]);
      expect(w.stats.malformed).toBe(1);
      expect(malformed).toEqual([w.stats.firstMalformed]);
      expect(w.stats.firstMalformed).toMatch(/conntrack attribute type 1 length 65520 overruns its container/);
      // A later good datagram is still delivered.
      execFileSync('ip', [
        'netns',
        'exec',
        ns.name,
        'python3',
        '-c',
        SEND,
        String(ports[0]),
        datagram(-1).toString('hex'),
      ]);
      const later = Date.now() + 5000;
      while (seen.length < 2 * entries.length - 1 && Date.now() < later) await new Promise((r) => setTimeout(r, 20));
      expect(seen.length).toBe(2 * entries.length - 1);
    } finally {
      w.stop();
    }
  });
});
