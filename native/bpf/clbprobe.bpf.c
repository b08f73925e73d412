// clbprobe datapath counters, attached to the node's uplink at tc ingress and
// egress (TCX, or legacy cls_bpf). The programs only read packets and bump
// per-CPU counters; they always return TC_ACT_UNSPEC (== TCX_NEXT) so that the
// CNI's own programs and the rest of the stack see every packet unchanged.
//
// What is counted (all kinds need a *local* source, from the `locals` trie):
//   to_lb        egress:  local source -> VIP:port (the `vips` set)
//   loop_return  ingress: local source -> NodePort (`nodeports`) or local pod
//   hc_local_src ingress: source is an address bound on this node
// A packet can bump both ingress kinds (e.g. node IP -> NodePort).
//
// Addresses are kept as 16 bytes; IPv4 uses the IPv4-mapped form ::ffff:a.b.c.d
// so that one trie and one hash serve both families. Packets are counted as
// GSO segments (a GRO/TSO super-packet stands for gso_segs wire packets).
//
// Keep the struct layouts in sync with src/capture/bpf-layout.ts.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define MAX_TARGETS 16384
#define MAX_COUNTERS 16384

enum kind { KIND_TO_LB = 1, KIND_LOOP_RETURN = 2, KIND_HC_LOCAL_SRC = 3 };
enum dir { DIR_INGRESS = 0, DIR_EGRESS = 1 };
// Values of the `locals` trie (bit flags: a node address may sit in a pod CIDR).
enum local_flag { LOCAL_BOUND = 1, LOCAL_POD = 2 };
// Slots of the `stats` array.
enum stat { STAT_SEEN_INGRESS = 0, STAT_SEEN_EGRESS = 1, STAT_COUNTERS_FULL = 2, STAT_MAX = 4 };

struct vip_key {
  __u8 addr[16];
  __u16 port;  // host order; 0 = any port
  __u8 proto;
  __u8 pad;
};

struct lpm_key {
  __u32 prefixlen;  // over the 16-byte form: IPv4 /24 is 96 + 24
  __u8 addr[16];
};

struct nodeport_key {
  __u16 port;  // host order
  __u8 proto;
  __u8 pad;
};

struct ctr_key {
  __u8 addr[16];  // VIP, local pod or bound source; NodePorts: :: or ::ffff:0.0.0.0
  __u16 port;     // host order
  __u8 proto;
  __u8 kind;
  __u8 dir;
  __u8 pad[3];
};

struct ctr_val {
  __u64 packets;
  __u64 bytes;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, MAX_TARGETS);
  __type(key, struct vip_key);
  __type(value, __u8);
} vips SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LPM_TRIE);
  __uint(max_entries, MAX_TARGETS);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct lpm_key);
  __type(value, __u32);
} locals SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, MAX_TARGETS);
  __type(key, struct nodeport_key);
  __type(value, __u8);
} nodeports SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, MAX_COUNTERS);
  __type(key, struct ctr_key);
  __type(value, struct ctr_val);
} counters SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, STAT_MAX);
  __type(key, __u32);
  __type(value, __u64);
} stats SEC(".maps");

// Bytes before the network header: 14 on Ethernet, 0 on L3 devices. Set by
// the loader before load; read-only data, so the verifier folds it.
const volatile __u32 l2_len = ETH_HLEN;

struct pkt {
  __u8 src[16];
  __u8 dst[16];
  __u16 sport, dport;  // host order
  __u8 proto;
  __u8 v4;
};

static __always_inline void bump_stat(__u32 slot) {
  __u64 *v = bpf_map_lookup_elem(&stats, &slot);
  if (v) *v += 1;
}

static __always_inline void set_v4_mapped(__u8 *dst, __u32 a) {
  __builtin_memset(dst, 0, 10);
  dst[10] = 0xff;
  dst[11] = 0xff;
  __builtin_memcpy(dst + 12, &a, 4);
}

static __always_inline int has_ports(__u8 proto) {
  return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP;
}

// Fills p from the IPv4 header at off; returns the L4 offset or -1.
static __always_inline int parse_v4(struct __sk_buff *skb, __u32 off, struct pkt *p) {
  struct iphdr ip = {};
  if (bpf_skb_load_bytes(skb, off, &ip, sizeof ip) < 0) return -1;
  // Non-first fragments carry no ports.
  if (ip.frag_off & bpf_htons(0x1fff)) return -1;
  set_v4_mapped(p->src, ip.saddr);
  set_v4_mapped(p->dst, ip.daddr);
  p->proto = ip.protocol;
  p->v4 = 1;
  return off + ip.ihl * 4;
}

// Fills p from the IPv6 header at off, skipping up to three extension headers.
static __always_inline int parse_v6(struct __sk_buff *skb, __u32 off, struct pkt *p) {
  struct ipv6hdr ip = {};
  if (bpf_skb_load_bytes(skb, off, &ip, sizeof ip) < 0) return -1;
  __builtin_memcpy(p->src, &ip.saddr, 16);
  __builtin_memcpy(p->dst, &ip.daddr, 16);
  p->v4 = 0;
  __u8 next = ip.nexthdr;
  off += sizeof ip;
#pragma unroll
  for (int i = 0; i < 3; i++) {
    __u8 ext[2];
    if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS) {
      if (bpf_skb_load_bytes(skb, off, ext, 2) < 0) return -1;
      next = ext[0];
      off += (ext[1] + 1) * 8;
    } else if (next == IPPROTO_FRAGMENT) {
      __be16 frag;
      if (bpf_skb_load_bytes(skb, off, ext, 2) < 0 ||
          bpf_skb_load_bytes(skb, off + 2, &frag, 2) < 0)
        return -1;
      if (frag & bpf_htons(0xfff8)) return -1;  // non-first fragment
      next = ext[0];
      off += 8;
    } else {
      break;
    }
  }
  p->proto = next;
  return off;
}

static __always_inline int parse(struct __sk_buff *skb, struct pkt *p) {
  int l4;
  if (skb->protocol == bpf_htons(ETH_P_IP))
    l4 = parse_v4(skb, l2_len, p);
  else if (skb->protocol == bpf_htons(ETH_P_IPV6))
    l4 = parse_v6(skb, l2_len, p);
  else
    return -1;
  if (l4 < 0 || !has_ports(p->proto)) return -1;
  __be16 ports[2];
  if (bpf_skb_load_bytes(skb, l4, ports, sizeof ports) < 0) return -1;
  p->sport = bpf_ntohs(ports[0]);
  p->dport = bpf_ntohs(ports[1]);
  return 0;
}

static __always_inline __u32 local_flags(const __u8 *addr) {
  struct lpm_key k = {.prefixlen = 128};
  __builtin_memcpy(k.addr, addr, 16);
  __u32 *v = bpf_map_lookup_elem(&locals, &k);
  return v ? *v : 0;
}

static __always_inline void count(const __u8 *addr, __u16 port, __u8 proto, __u8 kind, __u8 dir,
                                  struct __sk_buff *skb) {
  struct ctr_key k = {.port = port, .proto = proto, .kind = kind, .dir = dir};
  __builtin_memcpy(k.addr, addr, 16);
  __u64 segs = skb->gso_segs ? skb->gso_segs : 1;
  struct ctr_val *v = bpf_map_lookup_elem(&counters, &k);
  if (!v) {
    struct ctr_val init = {.packets = segs, .bytes = skb->len};
    if (bpf_map_update_elem(&counters, &k, &init, BPF_NOEXIST) == 0) return;
    v = bpf_map_lookup_elem(&counters, &k);  // another CPU created it meanwhile
    if (!v) {
      bump_stat(STAT_COUNTERS_FULL);
      return;
    }
  }
  // Per-CPU value: no other writer, no atomics needed.
  v->packets += segs;
  v->bytes += skb->len;
}

SEC("tc")
int clbp_egress(struct __sk_buff *skb) {
  bump_stat(STAT_SEEN_EGRESS);
  struct pkt p = {};
  if (parse(skb, &p) < 0) return TC_ACT_UNSPEC;
  // Destination first: most egress packets are not for a VIP.
  struct vip_key vk = {.port = p.dport, .proto = p.proto};
  __builtin_memcpy(vk.addr, p.dst, 16);
  if (!bpf_map_lookup_elem(&vips, &vk)) {
    vk.port = 0;
    if (!bpf_map_lookup_elem(&vips, &vk)) return TC_ACT_UNSPEC;
  }
  if (local_flags(p.src)) count(p.dst, vk.port, p.proto, KIND_TO_LB, DIR_EGRESS, skb);
  return TC_ACT_UNSPEC;
}

SEC("tc")
int clbp_ingress(struct __sk_buff *skb) {
  bump_stat(STAT_SEEN_INGRESS);
  struct pkt p = {};
  if (parse(skb, &p) < 0) return TC_ACT_UNSPEC;
  // Source first: most packets from the uplink come from elsewhere.
  __u32 src = local_flags(p.src);
  if (!src) return TC_ACT_UNSPEC;
  if (src & LOCAL_BOUND) count(p.src, p.dport, p.proto, KIND_HC_LOCAL_SRC, DIR_INGRESS, skb);
  struct nodeport_key nk = {.port = p.dport, .proto = p.proto};
  if (bpf_map_lookup_elem(&nodeports, &nk)) {
    __u8 any[16] = {};
    // Keep the family in the key: ::ffff:0.0.0.0 for IPv4, :: for IPv6.
    if (p.v4) {
      any[10] = 0xff;
      any[11] = 0xff;
    }
    count(any, p.dport, p.proto, KIND_LOOP_RETURN, DIR_INGRESS, skb);
  } else if (local_flags(p.dst) & LOCAL_POD) {
    count(p.dst, p.dport, p.proto, KIND_LOOP_RETURN, DIR_INGRESS, skb);
  }
  return TC_ACT_UNSPEC;
}

// Same licence as the project; the program calls no GPL-only helper.
char LICENSE[] SEC("license") = "Apache-2.0";
