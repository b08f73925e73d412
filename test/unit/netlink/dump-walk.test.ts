// The dump walk's end of a reply: NLMSG_DONE ends it, and a DONE that carries an error (as ctnetlink sends when a dump
// fails part-way) fails the dump with the kernel's errno and extended-ACK text instead of passing for a short table.
import { describe, expect, it } from 'vitest';
import { NLMSG_DONE, NLMSG_HDRLEN } from '../../../src/kernel/netlink/codec.js';
import { type DumpResult, NetlinkError, walkDumpDatagram } from '../../../src/kernel/netlink/socket.js';

const SEQ = 7;
const PORT = 4242;
const NLM_F_MULTI = 0x2;
const NLM_F_ACK_TLVS = 0x200;
const NLMSGERR_ATTR_MSG = 1;
const EBUSY = 16;

/** One netlink message of ours: header, then payload padded to 4 bytes. */
function message(type: number, flags: number, payload: Buffer): Buffer {
  const len = NLMSG_HDRLEN + payload.length;
  const b = Buffer.alloc((len + 3) & ~3);
  b.writeUInt32LE(len, 0);
  b.writeUInt16LE(type, 4);
  b.writeUInt16LE(flags, 6);
  b.writeUInt32LE(SEQ, 8);
  b.writeUInt32LE(PORT, 12);
  payload.copy(b, NLMSG_HDRLEN);
  return b;
}

function int32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32LE(n);
  return b;
}

/** An NLMSGERR_ATTR_MSG attribute holding text. */
function extAckText(text: string): Buffer {
  const value = Buffer.from(`${text}\0`);
  const b = Buffer.alloc((4 + value.length + 3) & ~3);
  b.writeUInt16LE(4 + value.length, 0);
  b.writeUInt16LE(NLMSGERR_ATTR_MSG, 2);
  value.copy(b, 4);
  return b;
}

/** Walks one datagram: whether it ended the dump, and how many data messages were visited. */
function walk(datagram: Buffer): { done: boolean; visited: number } {
  const res: DumpResult = { messages: 0, interrupted: false };
  let visited = 0;
  const done = walkDumpDatagram(datagram, 0, datagram.length, SEQ, PORT, 'test dump', res, () => void visited++);
  return { done, visited };
}

const entry = message(0x100, NLM_F_MULTI, Buffer.alloc(8));

describe('walkDumpDatagram at NLMSG_DONE', () => {
  it('ends the dump at a DONE whose error code is 0, after the messages before it', () => {
    expect(walk(Buffer.concat([entry, entry, message(NLMSG_DONE, NLM_F_MULTI, int32(0))]))).toEqual({
      done: true,
      visited: 2,
    });
  });

  it('throws the errno a DONE carries', () => {
    const datagram = Buffer.concat([entry, message(NLMSG_DONE, NLM_F_MULTI, int32(-EBUSY))]);
    expect(() => walk(datagram)).toThrow(NetlinkError);
    expect(() => walk(datagram)).toThrow(expect.objectContaining({ errno: EBUSY, message: 'test dump: EBUSY' }));
  });

  it("throws with the kernel's extended-ACK text when the DONE carries one", () => {
    const payload = Buffer.concat([int32(-EBUSY), extAckText('dump interrupted')]);
    const datagram = message(NLMSG_DONE, NLM_F_MULTI | NLM_F_ACK_TLVS, payload);
    expect(() => walk(datagram)).toThrow('test dump: EBUSY (dump interrupted)');
  });

  it('a DONE of another sequence does not end or fail the dump', () => {
    const stray = message(NLMSG_DONE, NLM_F_MULTI, int32(-EBUSY));
    stray.writeUInt32LE(SEQ + 1, 8);
    expect(walk(Buffer.concat([stray, entry]))).toEqual({ done: false, visited: 1 });
  });
});
