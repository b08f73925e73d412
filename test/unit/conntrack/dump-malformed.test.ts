// One bad entry in a conntrack dump: the real recorded dump (test/fixtures/netlink/ctnetlink-dump.hex,
// the kernel's reply datagrams) replayed through the dump's own datagram walk (walkDumpDatagram,
// what NetlinkSocket.dumpRaw runs on each received datagram) into dumpConntrack/readConntrack,
// with one message in the middle corrupted. A message whose attributes do not parse is skipped,
// counted and described, and the entries before and after it are kept; a message length header
// that does not fit its datagram still fails the dump (nothing after it can be found).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeEntry } from '../../../src/kernel/conntrack/decode.js';
import { dumpConntrack, malformedNote, readConntrack } from '../../../src/kernel/conntrack/dump.js';
import { NetlinkParseError, NLMSG_DONE, NLMSG_HDRLEN, splitMessages } from '../../../src/kernel/netlink/codec.js';
import { type DumpResult, type RawDumper, walkDumpDatagram } from '../../../src/kernel/netlink/socket.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';

const recorded = readFileSync(join(import.meta.dirname, '../../fixtures/netlink/ctnetlink-dump.hex'), 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((h) => Buffer.from(h, 'hex'));
const first = recorded[0]!;
const seq = first.readUInt32LE(8);
const pid = first.readUInt32LE(12);

/** The entries of the untouched dump, in order. */
const all: ConntrackEntry[] = recorded
  .flatMap((d) => splitMessages(d))
  .filter((m) => m.type !== NLMSG_DONE)
  .map((m) => decodeEntry(m.payload));

/** Offsets of the entry messages in the first datagram. */
function messageOffsets(d: Buffer): number[] {
  const out: number[] = [];
  for (let o = 0; o < d.length; o += (d.readUInt32LE(o) + 3) & ~3)
    if (d.readUInt16LE(o + 4) !== NLMSG_DONE) out.push(o);
  return out;
}

/** The kernel's recorded datagrams as a socket would receive them, one receive call each. */
function replay(datagrams: Buffer[]): RawDumper {
  return {
    async dumpRaw(_req, what, visit, afterBatch) {
      const res: DumpResult = { messages: 0, interrupted: false };
      for (const d of datagrams) {
        const done = walkDumpDatagram(d, 0, d.length, seq, pid, what, res, visit);
        await afterBatch?.();
        if (done) return res;
      }
      throw new Error('replay: no NLMSG_DONE');
    },
    close() {},
  };
}

/** The recorded dump with the message at index `which` of the first datagram changed by `edit`. */
function corrupted(which: number, edit: (d: Buffer, msgAt: number) => void): Buffer[] {
  const d = Buffer.from(first);
  edit(d, messageOffsets(d)[which]!);
  return [d, ...recorded.slice(1)];
}

async function dumpAll(datagrams: Buffer[]) {
  const got: ConntrackEntry[] = [];
  const res = await dumpConntrack((b) => void got.push(...b), { socket: replay(datagrams) });
  return { got, res };
}

describe('a conntrack dump with one malformed entry', () => {
  it('the recorded dump holds entries on both sides of the one corrupted', async () => {
    expect(all.length).toBeGreaterThanOrEqual(3);
    expect(messageOffsets(first).length).toBe(all.length);
    const { got, res } = await dumpAll(recorded);
    expect(got).toEqual(all);
    expect(res).toMatchObject({ entries: all.length, malformed: 0 });
    expect(malformedNote(res)).toBeUndefined();
  });

  it('skips the entry whose attribute overruns its message, keeps the ones before and after, and says which', async () => {
    // The first attribute (CTA_TUPLE_ORIG, after the 4-byte nfgenmsg) claims 65 KB; nlmsg_len is untouched.
    const bad = corrupted(1, (d, at) => d.writeUInt16LE(0xfff0, at + NLMSG_HDRLEN + 4));
    const { got, res } = await dumpAll(bad);
    expect(got).toEqual([all[0], ...all.slice(2)]);
    expect(res.entries).toBe(all.length - 1);
    expect(res.malformed).toBe(1);
    expect(res.messages).toBe(all.length);
    expect(res.firstMalformed).toMatch(
      /^message 2 of the dump: netlink: conntrack attribute type 1 length 65520 overruns its container \(at byte 4\)$/,
    );
    expect(malformedNote(res)).toBe(`1 malformed conntrack entry skipped (first: ${res.firstMalformed})`);
  });

  it('readConntrack: the source stays up with the entries kept, its reason names the skipped entry', async () => {
    const bad = corrupted(1, (d, at) => d.writeUInt16LE(0xfff0, at + NLMSG_HDRLEN + 4));
    const r = await readConntrack({ socket: replay(bad), entries: true });
    expect(r.status.available).toBe(true);
    expect(r.status.reason).toMatch(
      /^1 malformed conntrack entry skipped \(first: message 2 of the dump: .*overruns its container/,
    );
    expect(r.malformed).toBe(1);
    expect(r.entries).toEqual([all[0], ...all.slice(2)]);
    expect(r.summary?.total).toBe(all.length - 1);
  });

  it('two malformed entries (a wrong family, a tuple without addresses): both counted, the first described', async () => {
    const bad = corrupted(0, (d, at) => {
      d[at + NLMSG_HDRLEN] = 7; // nfgenmsg family
    });
    const d = bad[0]!;
    const last = messageOffsets(d).at(-1)!;
    // CTA_TUPLE_ORIG's first nested attribute (CTA_TUPLE_IP) retyped: the tuple has no addresses.
    d.writeUInt16LE(0x8000 | 9, last + NLMSG_HDRLEN + 4 + 4 + 2);
    const { got, res } = await dumpAll(bad);
    expect(got).toEqual(all.slice(1, -1));
    expect(res.malformed).toBe(2);
    expect(res.firstMalformed).toBe('message 1 of the dump: netlink: conntrack family 7 (at byte 0)');
    expect(malformedNote(res)).toMatch(/^2 malformed conntrack entries skipped \(first: message 1 /);
  });

  it('every single-byte corruption of a middle entry after its header: the dump completes, the others are kept', async () => {
    const at = messageOffsets(first)[1]!;
    const len = first.readUInt32LE(at);
    const others = [all[0], ...all.slice(2)];
    let skipped = 0;
    for (let i = NLMSG_HDRLEN; i < len; i++) {
      for (const v of [0x00, 0xff, 0x03, 0x41]) {
        const { got, res } = await dumpAll(corrupted(1, (d, m) => void (d[m + i] = v)));
        if (res.malformed) {
          skipped++;
          expect(got, `byte ${i} = ${v}`).toEqual(others);
        } else {
          expect(got.length, `byte ${i} = ${v}`).toBe(all.length);
          expect([got[0], ...got.slice(2)]).toEqual(others);
        }
      }
    }
    expect(skipped).toBeGreaterThan(0);
  });

  it('a message length header that does not fit its datagram still fails the dump clearly', async () => {
    const bad = corrupted(1, (d, at) => d.writeUInt32LE(0xffff, at));
    await expect(dumpAll(bad)).rejects.toThrow(NetlinkParseError);
    await expect(dumpAll(bad)).rejects.toThrow(/message length 65535 does not fit the \d+ bytes left/);
    const short = corrupted(1, (d, at) => d.writeUInt32LE(8, at));
    await expect(dumpAll(short)).rejects.toThrow(/message length 8 does not fit/);
    const r = await readConntrack({ socket: replay(bad) });
    expect(r.status.available).toBe(false);
    expect(r.summary).toBeUndefined();
    expect(r.status.reason).toMatch(/message length 65535 does not fit/);
  });

  it("another request's or socket's messages (sequence or port differing in either 16-bit half) are not counted", () => {
    // The first datagram's messages re-stamped with a sequence and port of 2^31 and more; then, in
    // each of four walks, one message's field changed in one half: only that message is not ours.
    const ourSeq = 0x8001_0002;
    const ourPort = 0xc003_0004;
    const offsets = messageOffsets(first);
    const changes: [field: number, xor: number][] = [
      [8, 0x0001], // the sequence's low half
      [8, 0x0001_0000], // the sequence's high half
      [12, 0x0001], // the port's low half
      [12, 0x0001_0000], // the port's high half
    ];
    changes.forEach(([field, xor], i) => {
      const d = Buffer.from(first);
      for (const o of offsets) {
        d.writeUInt32LE(ourSeq, o + 8);
        d.writeUInt32LE(ourPort, o + 12);
      }
      const stranger = offsets[i % offsets.length]!;
      d.writeUInt32LE((d.readUInt32LE(stranger + field) ^ xor) >>> 0, stranger + field);
      const seen: number[] = [];
      const res: DumpResult = { messages: 0, interrupted: false };
      walkDumpDatagram(
        d,
        0,
        d.length,
        ourSeq,
        ourPort,
        'test',
        res,
        (_b, start) => void seen.push(start - NLMSG_HDRLEN),
      );
      expect(seen).toEqual(offsets.filter((o) => o !== stranger));
      expect(res.messages).toBe(offsets.length - 1);
    });
  });
});
