// An SCTP entry as ctnetlink sends it (CTA_PROTOINFO { CTA_PROTOINFO_SCTP { STATE } }): its state is printed where
// `conntrack -L` prints it (after the timeout, as TCP's), kept by the compact form, and counted as that state.
import { describe, expect, it } from 'vitest';
import { CompactEntry } from '../../../src/kernel/conntrack/compact.js';
import * as C from '../../../src/kernel/conntrack/constants.js';
import { CtView, decodeEntry } from '../../../src/kernel/conntrack/decode.js';
import { SummaryCounter } from '../../../src/kernel/conntrack/dump.js';
import { formatConntrack } from '../../../src/kernel/conntrack/format.js';
import { MessageWriter, NLM_F_CREATE, NLM_F_REQUEST, splitMessages } from '../../../src/kernel/netlink/codec.js';

const IPPROTO_SCTP = 132;
/** enum sctp_conntrack's SCTP_CONNTRACK_ESTABLISHED. */
const SCTP_ESTABLISHED = 4;

/** The payload of a CT_NEW for 10.244.1.10:40000 -> 10.0.100.100:80, DNATed to 10.244.1.20:8080, in `state`. */
function sctpEntry(state: number): Buffer {
  const ip = (s: string) => Buffer.from(s.split('.').map(Number));
  const w = new MessageWriter((C.NFNL_SUBSYS_CTNETLINK << 8) | C.IPCTNL_MSG_CT_NEW, NLM_F_REQUEST | NLM_F_CREATE)
    .u8(C.AF_INET)
    .u8(0)
    .u16(0);
  const tuple = (type: number, s: string, d: string, sp: number, dp: number): void => {
    w.beginNested(type)
      .beginNested(C.CTA_TUPLE_IP)
      .attr(C.CTA_IP_V4_SRC, ip(s))
      .attr(C.CTA_IP_V4_DST, ip(d))
      .endNested()
      .beginNested(C.CTA_TUPLE_PROTO)
      .attrU8(C.CTA_PROTO_NUM, IPPROTO_SCTP)
      .attrU16be(C.CTA_PROTO_SRC_PORT, sp)
      .attrU16be(C.CTA_PROTO_DST_PORT, dp)
      .endNested()
      .endNested();
  };
  tuple(C.CTA_TUPLE_ORIG, '10.244.1.10', '10.0.100.100', 40000, 80);
  tuple(C.CTA_TUPLE_REPLY, '10.244.1.20', '10.244.1.10', 8080, 40000);
  w.beginNested(C.CTA_PROTOINFO)
    .beginNested(C.CTA_PROTOINFO_SCTP)
    .attrU8(C.CTA_PROTOINFO_SCTP_STATE, state)
    .attrU32be(2, 0x1234) // CTA_PROTOINFO_SCTP_VTAG_ORIGINAL: not printed by conntrack -L
    .endNested()
    .endNested();
  w.attrU32be(C.CTA_STATUS, C.IPS_SEEN_REPLY | 0x0c)
    .attrU32be(C.CTA_TIMEOUT, 431999)
    .attrU32be(C.CTA_MARK, 0);
  return splitMessages(w.finish())[0]!.payload;
}

const LINE =
  'sctp     132 431999 ESTABLISHED src=10.244.1.10 dst=10.0.100.100 sport=40000 dport=80 ' +
  'src=10.244.1.20 dst=10.244.1.10 sport=8080 dport=40000 [ASSURED] mark=0';

describe('SCTP conntrack state', () => {
  it('decodes CTA_PROTOINFO_SCTP_STATE and prints it as conntrack -L does', () => {
    const e = decodeEntry(sctpEntry(SCTP_ESTABLISHED));
    expect(e).toMatchObject({ proto: 'sctp', sctpState: 'ESTABLISHED', tcpState: undefined });
    expect(formatConntrack(e)).toBe(LINE);
    expect(decodeEntry(sctpEntry(2)).sctpState).toBe('COOKIE_WAIT');
  });

  it('keeps the state in the compact form, from the view and from an entry', () => {
    const p = sctpEntry(SCTP_ESTABLISHED);
    const want = decodeEntry(p);
    for (const c of [CompactEntry.fromView(new CtView().decode(p, 0, p.length))!, CompactEntry.fromEntry(want)!]) {
      expect(c.toEntry()).toEqual(want);
      expect([c.sctpState, c.tcpState]).toEqual(['ESTABLISHED', undefined]);
      expect(formatConntrack(c)).toBe(LINE);
    }
  });

  it('counts the entry under its state, not REPLIED', () => {
    const p = sctpEntry(SCTP_ESTABLISHED);
    const byView = new SummaryCounter();
    byView.addView(new CtView().decode(p, 0, p.length));
    const byEntry = new SummaryCounter();
    byEntry.add(decodeEntry(p));
    for (const c of [byView, byEntry]) expect(c.summary.byState).toEqual({ ESTABLISHED: 1 });
  });
});
