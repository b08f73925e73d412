// ctnetlink numbers (include/uapi/linux/netfilter/nfnetlink_conntrack.h,
// nf_conntrack_common.h, nf_conntrack_tcp.h).

export const NFNL_SUBSYS_CTNETLINK = 1;
export const IPCTNL_MSG_CT_NEW = 0;
export const IPCTNL_MSG_CT_GET = 1;
export const IPCTNL_MSG_CT_DELETE = 2;
export const NFGENMSG_LEN = 4;

export const CTA_TUPLE_ORIG = 1;
export const CTA_TUPLE_REPLY = 2;
export const CTA_STATUS = 3;
export const CTA_PROTOINFO = 4;
export const CTA_TIMEOUT = 7;
export const CTA_MARK = 8;
export const CTA_COUNTERS_ORIG = 9;
export const CTA_COUNTERS_REPLY = 10;
export const CTA_USE = 11;
export const CTA_ID = 12;
export const CTA_ZONE = 18;
export const CTA_TIMESTAMP = 20;

export const CTA_TUPLE_IP = 1;
export const CTA_TUPLE_PROTO = 2;
export const CTA_IP_V4_SRC = 1;
export const CTA_IP_V4_DST = 2;
export const CTA_IP_V6_SRC = 3;
export const CTA_IP_V6_DST = 4;
export const CTA_PROTO_NUM = 1;
export const CTA_PROTO_SRC_PORT = 2;
export const CTA_PROTO_DST_PORT = 3;
export const CTA_PROTO_ICMP_ID = 4;
export const CTA_PROTO_ICMP_TYPE = 5;
export const CTA_PROTO_ICMP_CODE = 6;
export const CTA_PROTO_ICMPV6_ID = 7;
export const CTA_PROTO_ICMPV6_TYPE = 8;
export const CTA_PROTO_ICMPV6_CODE = 9;
export const CTA_PROTOINFO_TCP = 1;
export const CTA_PROTOINFO_TCP_STATE = 1;
export const CTA_PROTOINFO_SCTP = 3;
export const CTA_PROTOINFO_SCTP_STATE = 1;
export const CTA_COUNTERS_PACKETS = 1;
export const CTA_COUNTERS_BYTES = 2;
export const CTA_COUNTERS32_PACKETS = 3;
export const CTA_COUNTERS32_BYTES = 4;
export const CTA_TIMESTAMP_START = 1;

/** Multicast groups (NFNLGRP_*) for events. */
export const NFNLGRP_CONNTRACK_NEW = 1;
export const NFNLGRP_CONNTRACK_UPDATE = 2;
export const NFNLGRP_CONNTRACK_DESTROY = 3;

export const IPS_SEEN_REPLY = 1 << 1;
export const IPS_ASSURED = 1 << 2;
export const IPS_CONFIRMED = 1 << 3;
export const IPS_SRC_NAT = 1 << 4;
export const IPS_DST_NAT = 1 << 5;

/** IPS_* bit names in bit order. */
export const STATUS_NAMES = [
  'EXPECTED',
  'SEEN_REPLY',
  'ASSURED',
  'CONFIRMED',
  'SRC_NAT',
  'DST_NAT',
  'SEQ_ADJUST',
  'SRC_NAT_DONE',
  'DST_NAT_DONE',
  'DYING',
  'FIXED_TIMEOUT',
  'TEMPLATE',
  'UNTRACKED',
  'HELPER',
  'OFFLOAD',
  'HW_OFFLOAD',
] as const;

/** TCP conntrack states, as conntrack(8) names them. */
export const TCP_STATES = [
  'NONE',
  'SYN_SENT',
  'SYN_RECV',
  'ESTABLISHED',
  'FIN_WAIT',
  'CLOSE_WAIT',
  'LAST_ACK',
  'TIME_WAIT',
  'CLOSE',
  'SYN_SENT2',
] as const;

/** SCTP conntrack states (enum sctp_conntrack), as conntrack(8) names them. */
export const SCTP_STATES = [
  'NONE',
  'CLOSED',
  'COOKIE_WAIT',
  'COOKIE_ECHOED',
  'ESTABLISHED',
  'SHUTDOWN_SENT',
  'SHUTDOWN_RECD',
  'SHUTDOWN_ACK_SENT',
  'HEARTBEAT_SENT',
  'HEARTBEAT_ACKED',
] as const;

export const PROTO_NAMES: Record<number, string> = {
  1: 'icmp',
  2: 'igmp',
  6: 'tcp',
  17: 'udp',
  33: 'dccp',
  47: 'gre',
  58: 'icmpv6',
  132: 'sctp',
  136: 'udplite',
};

export { AF_INET, AF_INET6 } from '../../model/address-family.js';
