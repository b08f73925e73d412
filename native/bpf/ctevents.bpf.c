// Kernel-side pre-check of conntrack events, attached (SO_ATTACH_BPF) to the
// agent's ctnetlink event socket. On a busy node most conntrack events touch no
// LB Service; without this filter each one is queued to the agent, copied out
// by recvmsg and looked at in JavaScript. The filter drops them where the
// kernel delivers the event to the socket.
//
// Its keys come from the one description of what is ours (src/model/ours.ts),
// and it is the same superset test as src/kernel/conntrack/prefilter.ts (whose
// exact test still runs on what passes): an event is dropped only when it is
// surely an IPv4 conntrack entry that touches none of the targets. Anything it
// cannot read (other message types, IPv6, unexpected layout, missing fields)
// is passed to user space.
//
// Keys live in one hash map; src/kernel/conntrack/kernel-filter.ts writes them.
// Addresses and ports are kept as the message carries them (network order).
#include <linux/bpf.h>
#include <linux/netlink.h>
#include <bpf/bpf_helpers.h>

#define MAX_KEYS 262144
#define AF_INET 2
#define NFNL_SUBSYS_CTNETLINK 1
#define NFGENMSG_LEN 4
// ctnetlink attribute types (include/uapi/linux/netfilter/nfnetlink_conntrack.h)
#define CTA_TUPLE_ORIG 1
#define CTA_TUPLE_REPLY 2
#define CTA_TUPLE_IP 1
#define CTA_TUPLE_PROTO 2
#define CTA_IP_V4_SRC 1
#define CTA_IP_V4_DST 2
#define CTA_PROTO_NUM 1
#define CTA_PROTO_SRC_PORT 2
#define CTA_PROTO_DST_PORT 3

// What a key stands for (kernel-filter.ts CT_KIND).
enum kind {
  KIND_PROTO = 1,      // proto: some target uses this protocol
  KIND_VIP = 2,        // original destination addr:port, proto
  KIND_NODE_IP = 3,    // addr: an address of this node
  KIND_NODE_PORT = 4,  // port, proto: a NodePort
  KIND_ENDPOINT = 5,   // reply source addr:port, proto
};

enum stat { STAT_PASSED = 0, STAT_DROPPED = 1, STAT_MAX = 2 };

struct ct_key {
  __u32 addr;  // network order
  __u16 port;  // network order
  __u8 proto;
  __u8 kind;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, MAX_KEYS);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct ct_key);
  __type(value, __u8);
} ct_keys SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, STAT_MAX);
  __type(key, enum stat);  // so that BTF carries the slots (kernel-filter.ts reads them)
  __type(value, __u64);
} ct_stats SEC(".maps");

// The two tuples as ctnetlink writes them for an IPv4 entry with ports (TCP,
// UDP, SCTP, ...): ctnetlink_conntrack_event puts CTA_TUPLE_ORIG first and
// CTA_TUPLE_REPLY second; ctnetlink_dump_tuples writes the address part, then
// the protocol part with the protocol number, then the source and destination
// port. The program checks every header against this layout and passes on any
// message that differs (a zone in the tuple, ICMP ids, a future kernel), so it
// needs no loops: straight-line code is quick to verify. (Bounded loops over the
// attributes take long enough to verify that a profiler's SIGPROF can make the
// load fail with EAGAIN.)
struct attr_u32 {
  struct nlattr h;
  __u32 v;
};
struct attr_u16 {
  struct nlattr h;
  __u16 v;
  __u16 pad;
};
struct attr_u8 {
  struct nlattr h;
  __u8 v;
  __u8 pad[3];
};
struct tuple {
  struct nlattr h;        // CTA_TUPLE_ORIG / CTA_TUPLE_REPLY, 52 bytes
  struct nlattr ip;       // CTA_TUPLE_IP, 20 bytes
  struct attr_u32 src;    // CTA_IP_V4_SRC
  struct attr_u32 dst;    // CTA_IP_V4_DST
  struct nlattr l4;       // CTA_TUPLE_PROTO, 28 bytes
  struct attr_u8 num;     // CTA_PROTO_NUM
  struct attr_u16 sport;  // CTA_PROTO_SRC_PORT
  struct attr_u16 dport;  // CTA_PROTO_DST_PORT
};
struct head {
  struct tuple orig;
  struct tuple reply;
};

static __always_inline int is(const struct nlattr *a, __u16 type, __u16 len) {
  return (a->nla_type & NLA_TYPE_MASK) == type && a->nla_len == len;
}

// Up to the protocol number: also what ICMP entries have.
static __always_inline int head_ok(const struct tuple *t, __u16 type) {
  return (t->h.nla_type & NLA_TYPE_MASK) == type && is(&t->ip, CTA_TUPLE_IP, 20) && is(&t->src.h, CTA_IP_V4_SRC, 8) &&
         is(&t->dst.h, CTA_IP_V4_DST, 8) && (t->l4.nla_type & NLA_TYPE_MASK) == CTA_TUPLE_PROTO &&
         is(&t->num.h, CTA_PROTO_NUM, 5);
}

static __always_inline int ports_ok(const struct tuple *t, __u16 type) {
  return is(&t->h, type, sizeof(struct tuple)) && is(&t->l4, CTA_TUPLE_PROTO, 28) &&
         is(&t->sport.h, CTA_PROTO_SRC_PORT, 6) && is(&t->dport.h, CTA_PROTO_DST_PORT, 6);
}

static __always_inline void count(__u32 slot) {
  __u64 *v = bpf_map_lookup_elem(&ct_stats, &slot);
  if (v) *v += 1;
}

static __always_inline int has(__u32 addr, __u16 port, __u8 proto, __u8 kind) {
  struct ct_key k = {.addr = addr, .port = port, .proto = proto, .kind = kind};
  return bpf_map_lookup_elem(&ct_keys, &k) != NULL;
}

static __always_inline int keep(struct __sk_buff *skb) {
  count(STAT_PASSED);
  return skb->len;
}

static __always_inline int drop(void) {
  count(STAT_DROPPED);
  return 0;
}

#define ATTRS (NLMSG_HDRLEN + NFGENMSG_LEN)

SEC("socket")
int ct_event_filter(struct __sk_buff *skb) {
  struct nlmsghdr nh;
  __u8 family;
  struct head m;
  if (skb->len < ATTRS + sizeof m || bpf_skb_load_bytes(skb, 0, &nh, sizeof nh)) return keep(skb);
  if ((nh.nlmsg_type >> 8) != NFNL_SUBSYS_CTNETLINK || nh.nlmsg_len < ATTRS + sizeof m) return keep(skb);
  if (bpf_skb_load_bytes(skb, NLMSG_HDRLEN, &family, 1) || family != AF_INET) return keep(skb);
  if (bpf_skb_load_bytes(skb, ATTRS, &m, sizeof m)) return keep(skb);
  if (!head_ok(&m.orig, CTA_TUPLE_ORIG)) return keep(skb);
  __u8 proto = m.orig.num.v;
  if (!has(0, 0, proto, KIND_PROTO)) return drop();
  if (!ports_ok(&m.orig, CTA_TUPLE_ORIG)) return keep(skb);
  __u32 dst = m.orig.dst.v;
  __u16 dport = m.orig.dport.v;
  if (has(dst, dport, proto, KIND_VIP)) return keep(skb);
  if (has(dst, 0, 0, KIND_NODE_IP) && has(0, dport, proto, KIND_NODE_PORT)) return keep(skb);
  // After DNAT the reply comes from the endpoint.
  if (!head_ok(&m.reply, CTA_TUPLE_REPLY) || !ports_ok(&m.reply, CTA_TUPLE_REPLY)) return keep(skb);
  if (has(m.reply.src.v, m.reply.sport.v, proto, KIND_ENDPOINT)) return keep(skb);
  return drop();
}

char LICENSE[] SEC("license") = "GPL";
