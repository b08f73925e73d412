// clbprobe datapath counters, attached to the node's uplink at tc ingress and
// egress (TCX, or legacy cls_bpf). The programs only read packets and bump
// per-CPU counters; they always return TC_ACT_UNSPEC (== TCX_NEXT) so that the
// CNI's own programs and the rest of the stack see every packet unchanged.
//
// What is counted (all kinds need a *local* source):
//   to_lb        egress:  local source -> VIP:port (`vips4` / `vips6`)
//   loop_return  ingress: local source -> NodePort (`filters`) or local pod
//   hc_local_src ingress: source is an address bound on this node
// A packet can bump both ingress kinds (e.g. node IP -> NodePort).
//
// These programs see every packet of the uplink, and nearly all of them match
// nothing, so the common path is kept short (bench/capture.ts measures it
// against an empty program):
// - headers are read in place (direct packet access); only when they are not
//   in the skb's linear part are they copied with bpf_skb_load_bytes;
// - ingress decides on the source address before it parses the rest of the
//   headers (protocol, extension headers, ports): most sources are remote;
// - IPv4 is looked up with 4-byte addresses, IPv6 with 16-byte ones;
// - an address is local when one of the node's few prefixes (pod CIDRs, and
//   its first host addresses while there is room) holds it, compared in place
//   from the `config` array, or when it is in the exact hash of the other host
//   addresses (`hosts4` / `hosts6`: e.g. kube-ipvs0 VIPs);
// - before a hash is looked up, a bitmap (`filters`) indexed by a hash of the
//   key says whether the key can be there at all: one memory word read decides
//   for nearly every packet that matches nothing. NodePorts are an exact bitmap;
// - nothing is written for a packet that matches nothing;
// - a VIP entry and a NodePort carry the index of their counter in the per-CPU
//   `slots` array (allocated by the agent, never reused while it runs), so a
//   matching packet bumps an array slot the verifier inlines instead of
//   hashing a 24-byte counter key. Slot 0 means none (the agent ran out):
//   such a packet, and the kinds keyed by the packet's own address and port
//   (a bound source, a local pod), are counted in the `counters` hash;
// - a VIP entry is found in `viptab`, an array of one-cache-line buckets
//   indexed by the key's filter bit, compared in place: a hash lookup is a
//   function call (retpolines, call-depth tracking) and costs more than the
//   whole rest of the path. A bucket holds two entries; a key that finds its
//   bucket full stays in `vips4` / `vips6` only, and the bucket's `more` says
//   to look there;
// - an address that equals one of the host addresses compared in place is
//   not in the host hash (the agent puts each address in one place only), so
//   that match ends the search.
// Packets are counted as GSO segments (a GRO/TSO super-packet stands for
// gso_segs wire packets).
//
// src/capture/bpf-layout.ts writes and reads these maps; test/unit/capture/
// bpf-layout-btf.test.ts checks its sizes and offsets against this object's BTF
// (the enums are map key/value types so that BTF carries their values).
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
// Counter slots for VIP entries and NodePorts (slot 0 is never used).
#define MAX_SLOTS 16384
_Static_assert((MAX_SLOTS & (MAX_SLOTS - 1)) == 0, "slots_seen is indexed with a mask");
// Prefixes (other than host addresses) per family; a node has one pod CIDR per
// family, so this is generous. src/capture/ebpf-maps.ts refuses more.
#define MAX_NETS 16
// Bits of the prefilter bitmaps (32768: ~1 in 6 false positives with 5,000 keys).
#define FILTER_BITS 15
#define FILTER_WORDS (1 << (FILTER_BITS - 6))
// Buckets of `viptab` (a power of two; 2 entries each: at 5,000 VIP keys about
// 2 % of them find their bucket full and are looked up in the hash).
#define VIPTAB_BUCKETS 8192

enum kind { KIND_TO_LB = 1, KIND_LOOP_RETURN = 2, KIND_HC_LOCAL_SRC = 3 };
enum dir { DIR_INGRESS = 0, DIR_EGRESS = 1 };
// Flags of a local address (a node address may sit in a pod CIDR: both).
enum local_flag { LOCAL_BOUND = 1, LOCAL_POD = 2 };
// Slots of the `stats` array (bumped only when something goes wrong).
enum stat { STAT_COUNTERS_FULL = 0, STAT_MAX = 1 };

struct vip4_key {
  __be32 addr;
  __u16 port;  // host order; 0 = any port
  __u8 proto;
  __u8 pad;
};

struct vip6_key {
  __u8 addr[16];
  __u16 port;  // host order; 0 = any port
  __u8 proto;
  __u8 pad;
};

struct net4 {
  __be32 addr;  // masked
  __be32 mask;
  __u32 flags;
};

struct net6 {
  __u64 addr[2];  // masked, network order
  __u64 mask[2];
  __u32 flags;
  __u32 pad;
};

// One entry (key 0), rewritten as a whole when the node's prefixes change.
struct config {
  __u32 n4;  // entries used in v4
  __u32 n6;
  // Whether hosts4 / hosts6 hold any address. Most nodes' host addresses all fit in v4/v6, and
  // then a source that no prefix holds is not local without reading the host filter's bitmap:
  // one cache line less for nearly every ingress packet (most come from elsewhere).
  __u32 hosts4;
  __u32 hosts6;
  struct net4 v4[MAX_NETS];
  struct net6 v6[MAX_NETS];
};

// One entry (key 0). A set bit at filter_bit(key) says the key may be in the
// hash; a clear one, that it is not. Written after the hashes when keys are
// added, so a key is never in the hash with its bit still clear.
struct filters {
  __u64 vip[FILTER_WORDS];   // (VIP address, port, protocol) of vips4/vips6
  __u64 host[FILTER_WORDS];  // addresses of hosts4/hosts6
  __u64 nodeport[3][65536 / 64];  // exact: NodePorts of TCP, UDP, SCTP
};

struct ctr_key {
  __u8 addr[16];  // VIP, local pod or bound source (IPv4 as ::ffff:a.b.c.d); NodePorts: :: or ::ffff:0.0.0.0
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

// A VIP entry in place: the address as in the packet (IPv4: addr[0]'s first 4
// bytes, the rest zero), tag = port | proto << 16 | family << 24 (family 4 or
// 6; tag 0 = empty entry), and its counter slot (0 = none).
struct vip_ent {
  __u64 addr[2];
  __u32 tag;
  __u32 slot;
};

// One cache line. The agent never moves an entry while its key stays, so a
// bucket rewritten under a reader only changes the entries of keys that come
// or go.
struct vip_bucket {
  struct vip_ent e[2];
  __u32 more;  // 1 = a key of this bucket is only in vips4/vips6
  __u32 pad[3];
};

// The counter slots of a NodePort, one per family (loop_return to ::ffff:0.0.0.0 or ::); 0 = none.
struct nodeport_slots {
  __u16 v4;
  __u16 v6;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, MAX_TARGETS);
  __type(key, struct vip4_key);
  __type(value, __u32);  // counter slot, 0 = none
} vips4 SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, MAX_TARGETS);
  __type(key, struct vip6_key);
  __type(value, __u32);  // counter slot, 0 = none
} vips6 SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, VIPTAB_BUCKETS);
  __type(key, __u32);
  __type(value, struct vip_bucket);
} viptab SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, MAX_TARGETS);
  __type(key, __be32);
  __type(value, enum local_flag);  // local_flag bits, OR-ed (a u32)
} hosts4 SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, MAX_TARGETS);
  __type(key, __u8[16]);
  __type(value, enum local_flag);  // local_flag bits, OR-ed (a u32)
} hosts6 SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct config);
} config SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct filters);
} filters SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, MAX_COUNTERS);
  __type(key, struct ctr_key);
  __type(value, struct ctr_val);
} counters SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, MAX_SLOTS);
  __type(key, __u32);
  __type(value, struct ctr_val);
} slots SEC(".maps");

// One byte per counter slot, 1 once the slot has been bumped (never cleared while the program is
// loaded), so that a reading copies out only the slots that can be non-zero: the kernel copies a
// per-CPU array out one element at a time (~0.6 us each here: 4-5 ms a scrape at 2,000 Services,
// bench/agent-scrape.ts), and most slots (a VIP or a
// NodePort that no flow of this node's reaches) stay at zero. Bytes, not bits: a plain store of 1
// races with no other CPU's, where setting a bit would need an atomic OR (kernel 5.12+).
struct slots_seen {
  __u8 seen[MAX_SLOTS];
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct slots_seen);
} slots_seen SEC(".maps");

// Index: protocol slot (as filters.nodeport) * 65536 + port.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 3 * 65536);
  __type(key, __u32);
  __type(value, struct nodeport_slots);
} nodeports SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, STAT_MAX);
  __type(key, enum stat);
  __type(value, __u64);
} stats SEC(".maps");

// Bytes before the network header: 14 on Ethernet, 0 on L3 devices. Set by
// the loader before load; read-only data, so the verifier folds it.
const volatile __u32 l2_len = ETH_HLEN;

// The headers a decision needs. IPv4 addresses sit in a4, IPv6 ones in a6.
struct pkt {
  union {
    __be32 a4;
    __u64 a6[2];
  } src, dst;
  __u16 sport, dport;  // host order
  __u8 proto;
  __u8 v4;
};

static __always_inline int has_ports(__u8 proto) {
  return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP;
}

static __always_inline int is_ext(__u8 next) {
  return next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS;
}

// A murmur3-style finaliser; src/capture/bpf-layout.ts computes the same.
static __always_inline __u32 mix(__u32 x) {
  x *= 0x9e3779b1;
  x ^= x >> 15;
  x *= 0x85ebca77;
  return x;
}

// Bit of a filter for a 32-bit key word, port and protocol. The word and the
// protocol choose the 512-bit block (one cache line), the port the bit in it:
// a VIP's exact-port and any-port bits share a line, and a packet that
// matches nothing costs one line of the bitmap.
static __always_inline __u32 filter_bit(__u32 w, __u16 port, __u8 proto) {
  __u32 h = mix(w ^ proto);
  __u32 block = h >> (32 - (FILTER_BITS - 9));
  return (block << 9) | ((h ^ mix(port + 1)) & 511);
}

// An IPv6 address folded to 32 bits (its four words XOR-ed, in host order).
static __always_inline __u32 fold6(const __u64 *a) {
  __u64 x = a[0] ^ a[1];
  return (__u32)x ^ (__u32)(x >> 32);
}

static __always_inline int test_bit(const __u64 *words, __u32 bit) {
  return (words[bit >> 6] >> (bit & 63)) & 1;
}

// Slow path: headers outside the linear part, copied out. Returns 0 or -1.
// Not inlined: the common path stays short, and so does the code it runs
// through (the stack between two packets evicts most of it from the cache).
static __noinline int parse_copy(struct __sk_buff *skb, struct pkt *p) {
  __u32 off = l2_len;
  if (p->v4) {
    struct iphdr ip;
    if (bpf_skb_load_bytes(skb, off, &ip, sizeof ip) < 0) return -1;
    if (ip.frag_off & bpf_htons(0x1fff)) return -1;  // non-first fragment: no ports
    p->src.a4 = ip.saddr;
    p->dst.a4 = ip.daddr;
    p->proto = ip.protocol;
    off += ip.ihl * 4;
  } else {
    struct ipv6hdr ip;
    if (bpf_skb_load_bytes(skb, off, &ip, sizeof ip) < 0) return -1;
    __builtin_memcpy(p->src.a6, &ip.saddr, 16);
    __builtin_memcpy(p->dst.a6, &ip.daddr, 16);
    __u8 next = ip.nexthdr;
    off += sizeof ip;
#pragma unroll
    for (int i = 0; i < 3; i++) {
      __u8 ext[4];
      if (is_ext(next)) {
        if (bpf_skb_load_bytes(skb, off, ext, 2) < 0) return -1;
        next = ext[0];
        off += (ext[1] + 1) * 8;
      } else if (next == IPPROTO_FRAGMENT) {
        if (bpf_skb_load_bytes(skb, off, ext, 4) < 0) return -1;
        if (((ext[2] << 8) | ext[3]) & 0xfff8) return -1;  // non-first fragment
        next = ext[0];
        off += 8;
      } else {
        break;
      }
    }
    p->proto = next;
  }
  if (!has_ports(p->proto)) return -1;
  __be16 ports[2];
  if (bpf_skb_load_bytes(skb, off, ports, sizeof ports) < 0) return -1;
  p->sport = bpf_ntohs(ports[0]);
  p->dport = bpf_ntohs(ports[1]);
  return 0;
}

// Fills p from the packet; returns 0, or -1 for packets nothing can match
// (non-IP, no ports, non-first fragments, truncated).
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p) {
  void *data = (void *)(long)skb->data;
  void *end = (void *)(long)skb->data_end;
  void *l4;
  if (skb->protocol == bpf_htons(ETH_P_IP)) {
    p->v4 = 1;
    struct iphdr *ip = data + l2_len;
    if ((void *)(ip + 1) > end) return parse_copy(skb, p);
    if (ip->frag_off & bpf_htons(0x1fff)) return -1;
    p->proto = ip->protocol;
    if (!has_ports(p->proto)) return -1;
    p->src.a4 = ip->saddr;
    p->dst.a4 = ip->daddr;
    l4 = (void *)ip + ip->ihl * 4;
  } else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
    p->v4 = 0;
    struct ipv6hdr *ip = data + l2_len;
    if ((void *)(ip + 1) > end) return parse_copy(skb, p);
    __u8 next = ip->nexthdr;
    l4 = ip + 1;
#pragma unroll
    for (int i = 0; i < 3; i++) {
      if (!is_ext(next) && next != IPPROTO_FRAGMENT) break;
      __u8 *ext = l4;
      if ((void *)(ext + 4) > end) return parse_copy(skb, p);
      if (next == IPPROTO_FRAGMENT) {
        if (((ext[2] << 8) | ext[3]) & 0xfff8) return -1;  // non-first fragment
        l4 += 8;
      } else {
        l4 += (ext[1] + 1) * 8;
      }
      next = ext[0];
    }
    p->proto = next;
    if (!has_ports(next)) return -1;
    __builtin_memcpy(p->src.a6, &ip->saddr, 16);
    __builtin_memcpy(p->dst.a6, &ip->daddr, 16);
  } else {
    return -1;
  }
  __be16 *ports = l4;
  if ((void *)(ports + 2) > end) return parse_copy(skb, p);
  p->sport = bpf_ntohs(ports[0]);
  p->dport = bpf_ntohs(ports[1]);
  return 0;
}

// local_flag bits of an address: the host hash, OR-ed with every configured
// prefix that holds it (the same as the longest match of a trie whose entries
// carry the flags of the prefixes covering them).
static __always_inline __u32 local_flags4(const struct config *c, const struct filters *f, __be32 a) {
  __u32 flags = 0;
  __u32 n = c->n4;
#pragma clang loop unroll(disable)
  for (__u32 i = 0; i < MAX_NETS; i++) {
    if (i >= n) break;
    if ((a & c->v4[i].mask) == c->v4[i].addr) {
      flags |= c->v4[i].flags;
      if (c->v4[i].mask == 0xffffffff) return flags;  // a host address: not in hosts4
    }
  }
  if (!c->hosts4 || !test_bit(f->host, filter_bit(a, 0, 0))) return flags;
  __u32 *h = bpf_map_lookup_elem(&hosts4, &a);
  return h ? flags | *h : flags;
}

static __always_inline __u32 local_flags6(const struct config *c, const struct filters *f, const __u64 *a) {
  __u32 flags = 0;
  __u32 n = c->n6;
#pragma clang loop unroll(disable)
  for (__u32 i = 0; i < MAX_NETS; i++) {
    if (i >= n) break;
    const struct net6 *e = &c->v6[i];
    if ((a[0] & e->mask[0]) == e->addr[0] && (a[1] & e->mask[1]) == e->addr[1]) {
      flags |= e->flags;
      if ((e->mask[0] & e->mask[1]) == ~0ULL) return flags;  // a host address: not in hosts6
    }
  }
  if (!c->hosts6 || !test_bit(f->host, filter_bit(fold6(a), 0, 0))) return flags;
  __u32 *h = bpf_map_lookup_elem(&hosts6, a);
  return h ? flags | *h : flags;
}

static __always_inline __u32 local_flags(const struct config *c, const struct filters *f, const struct pkt *p, int dst) {
  if (p->v4) return local_flags4(c, f, dst ? p->dst.a4 : p->src.a4);
  return local_flags6(c, f, dst ? p->dst.a6 : p->src.a6);
}

static __always_inline void bump_stat(__u32 slot) {
  __u64 *v = bpf_map_lookup_elem(&stats, &slot);
  if (v) *v += 1;
}

// The counter key's address: the 16-byte form of a4/a6 (IPv4-mapped for IPv4).
static __always_inline void key_addr(struct ctr_key *k, const struct pkt *p, int dst) {
  if (p->v4) {
    __u32 *w = (__u32 *)k->addr;
    w[2] = bpf_htonl(0xffff);
    w[3] = dst ? p->dst.a4 : p->src.a4;
  } else {
    __builtin_memcpy(k->addr, dst ? p->dst.a6 : p->src.a6, 16);
  }
}

static __always_inline void count(struct ctr_key *k, struct __sk_buff *skb) {
  __u64 segs = skb->gso_segs ? skb->gso_segs : 1;
  struct ctr_val *v = bpf_map_lookup_elem(&counters, k);
  if (!v) {
    struct ctr_val init = {.packets = segs, .bytes = skb->len};
    if (bpf_map_update_elem(&counters, k, &init, BPF_NOEXIST) == 0) return;
    v = bpf_map_lookup_elem(&counters, k);  // another CPU created it meanwhile
    if (!v) {
      bump_stat(STAT_COUNTERS_FULL);
      return;
    }
  }
  // Per-CPU value: no other writer, no atomics needed.
  v->packets += segs;
  v->bytes += skb->len;
}

// Bumps a counter slot (1 .. MAX_SLOTS-1).
static __always_inline void count_slot(__u32 slot, struct __sk_buff *skb) {
  struct ctr_val *v = bpf_map_lookup_elem(&slots, &slot);
  if (!v) return;
  v->packets += skb->gso_segs ? skb->gso_segs : 1;
  v->bytes += skb->len;
  // After the counts: a reader that sees the mark reads the slot then and at every later reading.
  __u32 zero = 0;
  struct slots_seen *s = bpf_map_lookup_elem(&slots_seen, &zero);
  if (!s) return;
  __u8 *seen = &s->seen[slot & (MAX_SLOTS - 1)];
  if (!*seen) *seen = 1;
}

// The VIP entry (destination, port, protocol), looked up in the bucket of its
// filter bit `bit`: 1 and its counter slot in *slot when there is one.
static __always_inline int vip_find(const struct pkt *p, __u16 port, __u32 bit, __u32 *slot) {
  __u32 at = bit & (VIPTAB_BUCKETS - 1);
  const struct vip_bucket *b = bpf_map_lookup_elem(&viptab, &at);
  if (!b) return 0;
  __u32 tag = port | (__u32)p->proto << 16 | (p->v4 ? 4u : 6u) << 24;
  __u64 a0 = p->v4 ? (__u64)p->dst.a4 : p->dst.a6[0];
  __u64 a1 = p->v4 ? 0 : p->dst.a6[1];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    if (b->e[i].tag == tag && b->e[i].addr[0] == a0 && b->e[i].addr[1] == a1) {
      *slot = b->e[i].slot;
      return 1;
    }
  }
  if (!b->more) return 0;
  __u32 *v;
  if (p->v4) {
    struct vip4_key k = {.addr = p->dst.a4, .port = port, .proto = p->proto};
    v = bpf_map_lookup_elem(&vips4, &k);
  } else {
    struct vip6_key k = {.port = port, .proto = p->proto};
    __builtin_memcpy(k.addr, p->dst.a6, 16);
    v = bpf_map_lookup_elem(&vips6, &k);
  }
  if (!v) return 0;
  *slot = *v;
  return 1;
}

// The VIP entry a destination matches: its port (the packet's or 0 = any) and
// its counter slot in *slot, or -1. The filter bit says first whether the key
// can be there at all.
static __always_inline int vip_port(const struct filters *f, const struct pkt *p, __u32 *slot) {
  __u32 w = p->v4 ? p->dst.a4 : fold6(p->dst.a6);
  __u32 bit = filter_bit(w, p->dport, p->proto);
  if (test_bit(f->vip, bit) && vip_find(p, p->dport, bit, slot)) return p->dport;
  bit = filter_bit(w, 0, p->proto);
  if (test_bit(f->vip, bit) && vip_find(p, 0, bit, slot)) return 0;
  return -1;
}

// Index of a protocol in filters.nodeport.
static __always_inline int proto_slot(__u8 proto) {
  return proto == IPPROTO_TCP ? 0 : proto == IPPROTO_UDP ? 1 : 2;
}

SEC("tc")
int clbp_egress(struct __sk_buff *skb) {
  struct pkt p;
  if (parse(skb, &p) < 0) return TC_ACT_UNSPEC;
  __u32 zero = 0;
  const struct filters *f = bpf_map_lookup_elem(&filters, &zero);
  if (!f) return TC_ACT_UNSPEC;
  // Destination first: most egress packets are not for a VIP.
  __u32 slot = 0;
  int port = vip_port(f, &p, &slot);
  if (port < 0) return TC_ACT_UNSPEC;
  const struct config *c = bpf_map_lookup_elem(&config, &zero);
  if (!c || !local_flags(c, f, &p, 0)) return TC_ACT_UNSPEC;
  if (slot) {
    count_slot(slot, skb);
    return TC_ACT_UNSPEC;
  }
  struct ctr_key k = {.port = port, .proto = p.proto, .kind = KIND_TO_LB, .dir = DIR_EGRESS};
  key_addr(&k, &p, 1);
  count(&k, skb);
  return TC_ACT_UNSPEC;
}

// The local_flag bits of an ingress packet's source, read before the rest of
// the headers are parsed: most packets from the uplink come from elsewhere and
// end here. -1 when the IP header is not in the linear part (parse copies it).
static __always_inline int src_flags(struct __sk_buff *skb, const struct config *c, const struct filters *f) {
  void *data = (void *)(long)skb->data;
  void *end = (void *)(long)skb->data_end;
  if (skb->protocol == bpf_htons(ETH_P_IP)) {
    struct iphdr *ip = data + l2_len;
    if ((void *)(ip + 1) > end) return -1;
    return local_flags4(c, f, ip->saddr);
  }
  if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr *ip = data + l2_len;
    if ((void *)(ip + 1) > end) return -1;
    __u64 a[2];
    __builtin_memcpy(a, &ip->saddr, 16);
    return local_flags6(c, f, a);
  }
  return 0;  // not IP: nothing to count
}

SEC("tc")
int clbp_ingress(struct __sk_buff *skb) {
  __u32 zero = 0;
  const struct filters *f = bpf_map_lookup_elem(&filters, &zero);
  const struct config *c = bpf_map_lookup_elem(&config, &zero);
  if (!f || !c) return TC_ACT_UNSPEC;
  int sf = src_flags(skb, c, f);
  if (!sf) return TC_ACT_UNSPEC;
  struct pkt p;
  if (parse(skb, &p) < 0) return TC_ACT_UNSPEC;
  __u32 src = sf > 0 ? (__u32)sf : local_flags(c, f, &p, 0);
  if (!src) return TC_ACT_UNSPEC;
  if (src & LOCAL_BOUND) {
    struct ctr_key k = {.port = p.dport, .proto = p.proto, .kind = KIND_HC_LOCAL_SRC, .dir = DIR_INGRESS};
    key_addr(&k, &p, 0);
    count(&k, skb);
  }
  struct ctr_key k = {.port = p.dport, .proto = p.proto, .kind = KIND_LOOP_RETURN, .dir = DIR_INGRESS};
  if (test_bit(f->nodeport[proto_slot(p.proto)], p.dport)) {
    __u32 at = proto_slot(p.proto) * 65536 + p.dport;
    const struct nodeport_slots *np = bpf_map_lookup_elem(&nodeports, &at);
    __u32 slot = np ? (p.v4 ? np->v4 : np->v6) : 0;
    if (slot) {
      count_slot(slot, skb);
      return TC_ACT_UNSPEC;
    }
    // Keep the family in the key: ::ffff:0.0.0.0 for IPv4, :: for IPv6.
    if (p.v4) ((__u32 *)k.addr)[2] = bpf_htonl(0xffff);
    count(&k, skb);
  } else if (local_flags(c, f, &p, 1) & LOCAL_POD) {
    key_addr(&k, &p, 1);
    count(&k, skb);
  }
  return TC_ACT_UNSPEC;
}

// Same licence as the project; the program calls no GPL-only helper.
char LICENSE[] SEC("license") = "Apache-2.0";
