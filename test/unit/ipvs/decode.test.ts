// Decoding recorded IPVS genl replies (Debian 6.1 kernel, via the VM test) on
// the host, and the same replies truncated or corrupted.
import { describe, expect, it } from 'vitest';
import { decodeDest, decodeService, destDumpRequest } from '../../../src/kernel/ipvs/decode.js';
import * as U from '../../../src/kernel/ipvs/uapi.js';
import { NetlinkParseError, NLMSG_HDRLEN, splitMessages, walkAttrs } from '../../../src/kernel/netlink/codec.js';
import { GENL_HDRLEN } from '../../../src/kernel/netlink/genl.js';
import { decodeRecorded, ipvsadmViews, recordedReplies } from './fixtures.js';
import { expectSameTable } from './same-table.js';

const replies = recordedReplies();
const payload = (i: number): Buffer => Buffer.from(replies[i]!.message.subarray(NLMSG_HDRLEN));
const firstDest = replies.findIndex((r) => r.kind === 'dest');

/** Offset of attribute `type`'s header inside the one nested container of a genl payload. */
function attrAt(p: Buffer, type: number): number {
  let at = -1;
  walkAttrs(p, GENL_HDRLEN + 4, p.length, (t, s) => {
    if (t === type) at = s - 4;
  });
  if (at < 0) throw new Error(`fixture has no attribute ${type}`);
  return at;
}

function parseError(fn: () => unknown): NetlinkParseError {
  try {
    fn();
  } catch (e) {
    if (e instanceof NetlinkParseError) return e;
    throw e;
  }
  throw new Error('decoded without error');
}

describe('IPVS genl decoding of recorded kernel replies', () => {
  it('rebuilds the table ipvsadm printed in the same VM run, field by field', () => {
    expectSameTable(decodeRecorded(replies), ipvsadmViews());
  });

  it('decodes the details the scenario set up', () => {
    const vss = decodeRecorded(replies).virtualServers;
    const lb = vss.find((v) => v.address === '192.0.2.10' && v.port === 443)!;
    expect(lb).toMatchObject({
      family: 4,
      protocol: 'TCP',
      scheduler: 'wrr',
      flags: ['persistent'],
      timeoutS: 600,
      netmask: '255.255.255.0',
    });
    expect(lb.realServers.find((r) => r.address === '10.244.1.2')).toMatchObject({
      port: 8443,
      weight: 3,
      forward: 'masq',
      upperThreshold: 100,
      lowerThreshold: 50,
    });
    expect(vss.find((v) => v.protocol === 'UDP' && v.port === 53)!.flags).toEqual(['sh-fallback', 'sh-port']);
    expect(vss.find((v) => v.port === 5353)!.flags).toEqual(['one-packet']);
    expect(vss.find((v) => v.protocol === 'SCTP')).toMatchObject({ address: '10.96.0.11', port: 3868 });
    const fwm42 = vss.find((v) => v.fwmark === 42)!;
    expect(fwm42).toMatchObject({ family: 4, protocol: 0 });
    expect(fwm42.address).toBeUndefined();
    expect(fwm42.realServers.find((r) => r.address === '10.244.2.3')!.tunnel).toEqual({
      type: 'gue',
      port: 6080,
      checksum: 'nocsum',
    });
    expect(fwm42.realServers.find((r) => r.address === '10.244.3.4')!.tunnel).toEqual({
      type: 'ipip',
      port: 0,
      checksum: 'nocsum',
    });
    expect(vss.find((v) => v.fwmark === 43)).toMatchObject({
      family: 6,
      timeoutS: 360,
      netmask: '128',
      flags: ['persistent'],
    });
    const v6 = vss.find((v) => v.address === 'fd00:96::10')!;
    expect(v6.realServers.map((r) => r.address).sort()).toEqual(['fd00:244::2', 'fd00:244::3']);
  });

  it('builds a GET_DEST request naming the service the way the kernel sent it', () => {
    const { selector } = decodeService(payload(0));
    const req = destDumpRequest(0x20, selector);
    const [m] = splitMessages(req);
    expect(m!.type).toBe(0x20);
    expect(m!.payload[0]).toBe(U.IPVS_CMD_GET_DEST);
    // The nested service attribute carries the same AF/protocol/addr/port bytes as the reply.
    const reply = payload(0);
    for (const type of [U.IPVS_SVC_ATTR_AF, U.IPVS_SVC_ATTR_PROTOCOL, U.IPVS_SVC_ATTR_ADDR, U.IPVS_SVC_ATTR_PORT]) {
      const a = attrAt(reply, type);
      const b = attrAt(m!.payload, type);
      const len = reply.readUInt16LE(a);
      expect(m!.payload.subarray(b, b + len), `attribute ${type}`).toEqual(reply.subarray(a, a + len));
    }
  });
});

describe('IPVS genl decoding of damaged replies', () => {
  it('rejects every truncation of a service and a dest message with NetlinkParseError', () => {
    for (const [i, decode] of [
      [0, (p: Buffer) => decodeService(p)],
      [firstDest, (p: Buffer) => decodeDest(p, 4)],
    ] as const) {
      const full = payload(i);
      for (let n = 0; n < full.length; n++) {
        expect(() => decode(full.subarray(0, n)), `cut at ${n} of ${full.length}`).toThrow(NetlinkParseError);
      }
    }
  });

  it('names the attribute and offset that is wrong', () => {
    const p = payload(0);
    const af = attrAt(p, U.IPVS_SVC_ATTR_AF);
    const badAf = Buffer.from(p);
    badAf.writeUInt16LE(7, af + 4);
    expect(parseError(() => decodeService(badAf)).message).toMatch(
      /IPVS_SVC_ATTR_AF 7 is neither AF_INET nor AF_INET6/,
    );

    const noAddr = Buffer.from(p);
    noAddr.writeUInt16LE(0x7ff, attrAt(p, U.IPVS_SVC_ATTR_ADDR) + 2); // retype: as if absent
    expect(parseError(() => decodeService(noAddr)).message).toMatch(/IPVS_SVC_ATTR_ADDR missing/);

    const overrun = Buffer.from(p);
    overrun.writeUInt16LE(0xfff0, GENL_HDRLEN); // the nested SERVICE claims more than the message holds
    const e = parseError(() => decodeService(overrun));
    expect(e.message).toMatch(/overruns its container/);
    expect(e.offset).toBe(GENL_HDRLEN);

    const d = payload(firstDest);
    const shortPort = Buffer.from(d);
    shortPort.writeUInt16LE(5, attrAt(d, U.IPVS_DEST_ATTR_PORT)); // 1-byte value
    expect(parseError(() => decodeDest(shortPort, 4)).message).toMatch(/IPVS_DEST_ATTR_PORT has 1 bytes, need 2/);

    expect(parseError(() => decodeDest(payload(0), 4)).message).toMatch(/IPVS_CMD_ATTR_DEST missing/);
  });

  it('never fails other than with NetlinkParseError on random corruption', () => {
    let seed = 12345;
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    for (const i of [0, firstDest]) {
      const full = payload(i);
      for (let trial = 0; trial < 2000; trial++) {
        const p = Buffer.from(full);
        for (let k = 0; k < 1 + rand(4); k++) p[rand(p.length)] = rand(256);
        try {
          if (i === 0) decodeService(p);
          else decodeDest(p, 4);
        } catch (e) {
          expect(e, `trial ${trial}`).toBeInstanceOf(NetlinkParseError);
        }
      }
    }
  });
});
