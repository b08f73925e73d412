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
// nothing, so the common path is kept short: its cost grows with the
// instructions it runs and the cache lines it touches (bench/capture.ts
// measures it against an empty program):
// - headers are read in place (direct packet access); only when they are not
//   in the skb's linear part are they copied with bpf_skb_load_bytes. The
//   bytes before the IP header are a constant (one object per link type);
// - each side first decides on one address, before it parses the rest of the
//   headers (protocol, extension headers, ports): egress on the destination
//   (is it a VIP address at all?), ingress on the source (is it local at
//   all?). Most packets end there;
// - the VIP filter has two bits per hashed destination address (one
//   multiply-shift hash, one memory word): some VIP entry of the address has
//   a port / is for any port. A packet to no VIP address ends after it; one
//   to a VIP address on a port without an entry (VIP:81) after a bit for the
//   hashed port and protocol, in the same cache line as its address's;
// - the maps the agent rewrites as a whole (`config`, `filters`, and the
//   slots' marks) are global variables (sections .data.config, .data.filters,
//   .data.seen: array maps of one entry, addressed directly, no lookup);
// - IPv4 is looked up with 4-byte addresses, IPv6 with 16-byte ones;
// - an address is local when one of the node's few prefixes (its first host
//   addresses while there is room, and pod CIDRs) holds it, compared in place
//   from `config`, or when it is in the exact hash of the other host
//   addresses (`hosts4` / `hosts6`: e.g. kube-ipvs0 VIPs). Before the hash is
//   looked up, the host filter (a bit per hashed address) says whether the
//   address can be there at all; neither is read when the hash is empty (most
//   nodes: all their addresses fit in place), nor when a prefix that holds the
//   address has no hashed address inside (LOCAL_IN_HASH: a pod source);
// - nothing is written for a packet that matches nothing;
// - a VIP entry and a NodePort carry the index of their counter in the per-CPU
//   `slots` array (allocated by the agent, never reused while it runs), so a
//   matching packet bumps an array slot the verifier inlines instead of
//   hashing a 24-byte counter key. Slot 0 means none (the agent ran out, or,
//   for a NodePort's family, the node has no local address of that family
//   outside link-local): such a packet, and the kinds keyed by the packet's
//   own address and port (a bound source, a local pod), are counted in the
//   `counters` hash;
// - a VIP entry is found in `viptab`, an array of one-cache-line buckets
//   indexed by a hash of the key, compared in place: a hash lookup is a
//   function call (retpolines, call-depth tracking) and costs more than the
//   whole rest of the path. A bucket holds two entries; a key that finds its
//   bucket full stays in `vips4` / `vips6` only, and the bucket's `more` says
//   to look there;
// - an address that equals one of the host addresses compared in place is
//   not in the host hash (the agent puts each address in one place only), and
//   those come first, each with the flags of the prefixes that hold it too, so
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
// The VIP filter: lines of 128 hashed addresses (VLINE_ADDR_BITS) and 256 key
// bits each; 256 lines, 16 KiB.
#define VLINE_BITS 8
#define VLINE_ADDR_BITS 7
#define VADDR_BITS (VLINE_BITS + VLINE_ADDR_BITS)
// Bits of the host filter (65536, 8 KiB: ~1 in 13 false positives with 5,000 host addresses).
#define HOST_BITS 16
#define HOST_WORDS (1 << (HOST_BITS - 6))
// Buckets of `viptab` (2 entries each: at 5,000 VIP keys about 2 % of them
// find their bucket full and are looked up in the hash).
#define VIPTAB_BITS 13
#define VIPTAB_BUCKETS (1 << VIPTAB_BITS)
// Multipliers of the filters' and viptab's hashes; src/capture/bpf-layout.ts uses the same.
#define HASH_MUL 0x9e3779b1u
#define PORT_MUL 0x85ebca77u

enum kind { KIND_TO_LB = 1, KIND_LOOP_RETURN = 2, KIND_HC_LOCAL_SRC = 3 };
enum dir { DIR_INGRESS = 0, DIR_EGRESS = 1 };
// Flags of a local address (a node address may sit in a pod CIDR: both).
// LOCAL_IN_HASH, only in `config`'s prefixes: the host hash holds addresses
// inside the prefix (an address a prefix without it holds is not in the hash).
enum local_flag { LOCAL_BOUND = 1, LOCAL_POD = 2, LOCAL_IN_HASH = 4 };
// Slots of the `stats` array (bumped only when something goes wrong).
enum stat { STAT_COUNTERS_FULL = 0, STAT_MAX = 1 };
// Bits of the VIP address filter.
enum vip_addr_bit { VADDR_PORT = 1, VADDR_ANY = 2 };

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

// Rewritten as a whole when the node's prefixes change.
struct config {
  __u32 n4;  // entries used in v4
  __u32 n6;
  // Whether hosts4 / hosts6 hold any address. Most nodes' host addresses all fit in v4/v6, and
  // then a source that no prefix holds is not local without reading the host filter: one
  // cache line less for nearly every ingress packet (most come from elsewhere).
  __u32 hosts4;
  __u32 hosts6;
  struct net4 v4[MAX_NETS];
  struct net6 v6[MAX_NETS];
};

// One cache line of the VIP filter: the vip_addr_bit bits of its hashed VIP
// addresses, and a bit per hashed key (address, port, protocol) of those
// addresses, so that the port of a packet to a VIP address is tested in the
// line its address was.
struct vip_line {
  __u64 addr[(2 << VLINE_ADDR_BITS) / 64];
  __u64 key[4];  // at key_bit_of(port, protocol)
};

// A set bit says a key may be there; a clear one, that it is not. Written after
// the hashes, `viptab` and `config` when keys are added, so a key is never in
// them with its bit still clear.
struct filters {
  struct vip_line vip[1 << VLINE_BITS];
  __u64 host[HOST_WORDS];  // addresses of hosts4/hosts6
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

// The counter slots of a NodePort, one per family (loop_return to ::ffff:0.0.0.0 or ::); 0 = none
// (a family's is 0 until the node has a local address of the family outside link-local).
struct nodeport_slots {
  __u16 v4;
  __u16 v6;
};

// One byte per counter slot, 1 once the slot has been bumped (never cleared while the program is
// loaded), so that a reading copies out only the slots that can be non-zero: the kernel copies a
// per-CPU array out one element at a time, and most slots (a VIP or a NodePort that no flow of
// this node's reaches) stay at zero. Bytes, not bits: a plain store of 1
// races with no other CPU's, where setting a bit would need an atomic OR (kernel 5.12+).
struct slots_seen {
  __u8 seen[MAX_SLOTS];
};

// The agent writes these (and reads `seen`) as the one entry of their sections' array maps.
struct config cfg SEC(".data.config");
struct filters flt SEC(".data.filters");
struct slots_seen seen SEC(".data.seen");

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

// Bytes before the network header: 14 on Ethernet, 0 on L3 devices. A
// constant: the build makes one object for each (binding.gyp), and the loader
// takes the one for its interface; a variable would cost a load per packet.
#ifndef L2_LEN
#define L2_LEN ETH_HLEN
#endif

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

// A port in host order. Older verifiers (5.10's) take a byte
// swap's result as an unknown 64-bit scalar, so the port indexes the NodePort
// bitmap only after a mask clang cannot drop (it knows the value is 16-bit).
static __always_inline __u16 port_of(__be16 net) {
  __u32 v = bpf_ntohs(net);
  asm volatile("%[v] &= 0xffff" : [v] "+r"(v));
  return v;
}

static __always_inline int has_ports(__u8 proto) {
  return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP;
}

static __always_inline int is_ext(__u8 next) {
  return next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS;
}

// The top `bits` bits of a multiplicative hash of x; the xor-shift first lets
// the high bytes (an IPv4 address's last octets, loaded little-endian) reach
// the top. src/capture/bpf-layout.ts computes the same.
static __always_inline __u32 hash_bits(__u32 x, int bits) {
  x ^= x >> 16;
  x *= HASH_MUL;
  return x >> (32 - bits);
}

// An IPv6 address's four words (in host order) XOR-ed: its key word.
static __always_inline __u32 fold6(const void *a) {
  const __u32 *w = a;
  return w[0] ^ w[1] ^ w[2] ^ w[3];
}

// The VIP filter's slot of an address key word (IPv4: the address; IPv6:
// fold6): line * 128 + index, shifted left 2, OR-ed with its vip_addr_bit bits.
static __always_inline __u32 vip_addr(__u32 w) {
  __u32 i = hash_bits(w, VADDR_BITS);
  const struct vip_line *l = &flt.vip[i >> VLINE_ADDR_BITS];
  return i << 2 | ((l->addr[(i >> 5) & 3] >> ((i & 31) * 2)) & 3);
}

// The bit of a key (port, protocol) in its address's line: the line is the
// address's already, so only the port and protocol are hashed.
static __always_inline __u32 key_bit_of(__u16 port, __u8 proto) {
  return (((__u32)port << 8 | proto) * PORT_MUL) >> 24;
}

// Whether a key (port, protocol) can be one of the address slot va's.
static __always_inline int vip_key_bit(__u32 va, __u16 port, __u8 proto) {
  const struct vip_line *l = &flt.vip[va >> (2 + VLINE_ADDR_BITS)];
  __u32 b = key_bit_of(port, proto);
  return (l->key[(b >> 6) & 3] >> (b & 63)) & 1;
}

// Whether a packet to the address slot va on (port, protocol) can match a VIP
// entry: the address has an any-port entry, or the key's bit is set.
static __always_inline int vip_maybe(__u32 va, __u16 port, __u8 proto) {
  return (va & VADDR_ANY) || vip_key_bit(va, port, proto);
}

static __always_inline int host_bit(__u32 w) {
  __u32 i = hash_bits(w, HOST_BITS);
  return (flt.host[i >> 6] >> (i & 63)) & 1;
}

// The viptab bucket of a VIP key: its key word, port and protocol.
static __always_inline __u32 vip_bucket_of(__u32 w, __u16 port, __u8 proto) {
  return hash_bits(w ^ (((__u32)port << 8 | proto) * PORT_MUL), VIPTAB_BITS);
}

static __always_inline int test_bit(const __u64 *words, __u32 bit) {
  return (words[bit >> 6] >> (bit & 63)) & 1;
}

// Slow path: headers outside the linear part, copied out. Returns 0 or -1.
// Not inlined: the common path stays short, and so does the code it runs
// through (the stack between two packets evicts most of it from the cache).
static __noinline int parse_copy(struct __sk_buff *skb, struct pkt *p) {
  __u32 off = L2_LEN;
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
  p->sport = port_of(ports[0]);
  p->dport = port_of(ports[1]);
  return 0;
}

// The rest of an IPv4 header in place, once its address decided: 0, -1 for
// packets nothing can match (no ports, non-first fragments), 1 when the ports
// are not in the linear part (parse_copy reads them).
static __always_inline int rest4(const struct iphdr *ip, void *end, struct pkt *p) {
  if (ip->frag_off & bpf_htons(0x1fff)) return -1;
  p->proto = ip->protocol;
  if (!has_ports(p->proto)) return -1;
  p->v4 = 1;
  p->src.a4 = ip->saddr;
  p->dst.a4 = ip->daddr;
  const __be16 *ports = (const void *)ip + ip->ihl * 4;
  if ((void *)(ports + 2) > end) return 1;
  p->sport = port_of(ports[0]);
  p->dport = port_of(ports[1]);
  return 0;
}

// The same for IPv6: extension headers (up to three), then the ports.
static __always_inline int rest6(const struct ipv6hdr *ip, void *end, struct pkt *p) {
  __u8 next = ip->nexthdr;
  const void *l4 = ip + 1;
#pragma unroll
  for (int i = 0; i < 3; i++) {
    if (!is_ext(next) && next != IPPROTO_FRAGMENT) break;
    const __u8 *ext = l4;
    if ((void *)(ext + 4) > end) return 1;
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
  p->v4 = 0;
  __builtin_memcpy(p->src.a6, &ip->saddr, 16);
  __builtin_memcpy(p->dst.a6, &ip->daddr, 16);
  const __be16 *ports = l4;
  if ((void *)(ports + 2) > end) return 1;
  p->sport = port_of(ports[0]);
  p->dport = port_of(ports[1]);
  return 0;
}

// local_flag bits of an address: every configured prefix that holds it,
// compared in place, OR-ed with the host hash (the same as the longest match
// of a trie whose entries carry the flags of the prefixes covering them). The
// host filter says first whether the hash can hold it.
// Unrolled by hand (clang does not unroll a loop that returns from inside):
// each entry costs its compare, not the loop's counting too.
#define EACH_NET(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
_Static_assert(MAX_NETS == 16, "EACH_NET names every entry");

static __always_inline __u32 local_flags4(__be32 a) {
  __u32 flags = 0;
  int hash = cfg.hosts4;  // whether the hash can hold it
  __u32 n = cfg.n4;
#define NET4(i)                                                                                          \
  if (i >= n) goto done;                                                                                 \
  if ((a & cfg.v4[i].mask) == cfg.v4[i].addr) {                                                          \
    flags |= cfg.v4[i].flags;                                                                            \
    if (cfg.v4[i].mask == 0xffffffff) return flags & ~LOCAL_IN_HASH; /* a host address: all its flags */ \
    if (!(cfg.v4[i].flags & LOCAL_IN_HASH)) hash = 0;                                                    \
  }
  EACH_NET(NET4)
#undef NET4
done:
  flags &= ~LOCAL_IN_HASH;
  if (!hash || !host_bit(a)) return flags;
  __u32 *h = bpf_map_lookup_elem(&hosts4, &a);
  return h ? flags | *h : flags;
}

// The same for an IPv6 address at `a` (in the packet or on the stack; 4-byte
// words, as struct in6_addr, so that it is read a word at a time).
static __always_inline __u32 local_flags6(const __u32 *a) {
  __u64 a6[2];
  __builtin_memcpy(a6, a, 16);
  __u32 flags = 0;
  int hash = cfg.hosts6;
  __u32 n = cfg.n6;
#define NET6(i)                                                                                                        \
  if (i >= n) goto done;                                                                                               \
  if ((a6[0] & cfg.v6[i].mask[0]) == cfg.v6[i].addr[0] && (a6[1] & cfg.v6[i].mask[1]) == cfg.v6[i].addr[1]) {        \
    flags |= cfg.v6[i].flags;                                                                                          \
    if ((cfg.v6[i].mask[0] & cfg.v6[i].mask[1]) == ~0ULL) return flags & ~LOCAL_IN_HASH; /* a host address: all its flags */ \
    if (!(cfg.v6[i].flags & LOCAL_IN_HASH)) hash = 0;                                                                  \
  }
  EACH_NET(NET6)
#undef NET6
done:
  flags &= ~LOCAL_IN_HASH;
  if (!hash || !host_bit(fold6(a6))) return flags;
  __u32 *h = bpf_map_lookup_elem(&hosts6, a6);
  return h ? flags | *h : flags;
}

static __always_inline __u32 local_flags(const struct pkt *p, int dst) {
  if (p->v4) return local_flags4(dst ? p->dst.a4 : p->src.a4);
  return local_flags6((const __u32 *)(dst ? p->dst.a6 : p->src.a6));
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
  __u8 *mark = &seen.seen[slot & (MAX_SLOTS - 1)];
  if (!*mark) *mark = 1;
}

// The VIP entry (destination whose key word is w and VIP filter slot va, port,
// protocol), looked up in its bucket once the filter lets it: 1 and its
// counter slot in *slot when there is one.
static __always_inline int vip_find(const struct pkt *p, __u32 w, __u32 va, __u16 port, __u32 *slot) {
  if (!vip_key_bit(va, port, p->proto)) return 0;
  __u32 at = vip_bucket_of(w, port, p->proto);
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

// An egress packet to a destination whose key word is `w` and VIP filter slot
// `va` (vip_addr): the VIP entry it matches (its exact port first, then any
// port), then whether its source is local; counts it if both.
static __always_inline void egress_match(struct __sk_buff *skb, const struct pkt *p, __u32 w, __u32 va) {
  __u32 slot = 0;
  int port = -1;
  if ((va & VADDR_PORT) && vip_find(p, w, va, p->dport, &slot)) port = p->dport;
  else if ((va & VADDR_ANY) && vip_find(p, w, va, 0, &slot)) port = 0;
  if (port < 0 || !local_flags(p, 0)) return;
  if (slot) {
    count_slot(slot, skb);
    return;
  }
  struct ctr_key k = {.port = port, .proto = p->proto, .kind = KIND_TO_LB, .dir = DIR_EGRESS};
  key_addr(&k, p, 1);
  count(&k, skb);
}

SEC("tc")
int clbp_egress(struct __sk_buff *skb) {
  void *data = (void *)(long)skb->data;
  void *end = (void *)(long)skb->data_end;
  struct pkt p;
  __u32 w, va;
  __u8 v4;
  if (skb->protocol == bpf_htons(ETH_P_IP)) {
    v4 = 1;
    const struct iphdr *ip = data + L2_LEN;
    if ((void *)(ip + 1) > end) goto copy;
    // Destination first: most egress packets are not for a VIP address.
    w = ip->daddr;
    va = vip_addr(w);
    if (!(va & 3)) return TC_ACT_UNSPEC;
    // Then the port, before the fragment and protocol checks (a VIP address on
    // a port without an entry ends here; rest4 checks all before a match).
    const __be16 *ports = (const void *)ip + ip->ihl * 4;
    if ((void *)(ports + 2) > end) goto copy;
    if (!vip_maybe(va, port_of(ports[1]), ip->protocol)) return TC_ACT_UNSPEC;
    struct pkt q;
    int r = rest4(ip, end, &q);
    if (r > 0) goto copy;
    if (r == 0) egress_match(skb, &q, w, va);
    return TC_ACT_UNSPEC;
  }
  if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
    v4 = 0;
    const struct ipv6hdr *ip = data + L2_LEN;
    if ((void *)(ip + 1) > end) goto copy;
    w = fold6(&ip->daddr);
    va = vip_addr(w);
    if (!(va & 3)) return TC_ACT_UNSPEC;
    if (has_ports(ip->nexthdr)) {  // no extension headers: the port, as for IPv4
      const __be16 *ports = (const void *)(ip + 1);
      if ((void *)(ports + 2) > end) goto copy;
      if (!vip_maybe(va, port_of(ports[1]), ip->nexthdr)) return TC_ACT_UNSPEC;
    }
    struct pkt q;
    int r = rest6(ip, end, &q);
    if (r > 0) goto copy;
    if (r == 0) egress_match(skb, &q, w, va);
    return TC_ACT_UNSPEC;
  }
  return TC_ACT_UNSPEC;  // not IP: nothing to count
copy:
  p.v4 = v4;
  if (parse_copy(skb, &p) < 0) return TC_ACT_UNSPEC;
  w = p.v4 ? p.dst.a4 : fold6(p.dst.a6);
  va = vip_addr(w);
  if (va & 3) egress_match(skb, &p, w, va);
  return TC_ACT_UNSPEC;
}

// Index of a protocol in filters.nodeport.
static __always_inline int proto_slot(__u8 proto) {
  return proto == IPPROTO_TCP ? 0 : proto == IPPROTO_UDP ? 1 : 2;
}

// An ingress packet whose source has local_flag bits `src` (non-zero).
static __always_inline void ingress_count(struct __sk_buff *skb, const struct pkt *p, __u32 src) {
  if (src & LOCAL_BOUND) {
    struct ctr_key k = {.port = p->dport, .proto = p->proto, .kind = KIND_HC_LOCAL_SRC, .dir = DIR_INGRESS};
    key_addr(&k, p, 0);
    count(&k, skb);
  }
  // A NodePort's slot first: the NodePort bitmap is read only for one without.
  __u32 ps = proto_slot(p->proto);
  __u32 at = ps * 65536 + p->dport;
  const struct nodeport_slots *np = bpf_map_lookup_elem(&nodeports, &at);
  __u32 slot = np ? (p->v4 ? np->v4 : np->v6) : 0;
  if (slot) {
    count_slot(slot, skb);
    return;
  }
  if (test_bit(flt.nodeport[ps], p->dport)) {
    // Keep the family in the key: ::ffff:0.0.0.0 for IPv4, :: for IPv6.
    struct ctr_key k = {.port = p->dport, .proto = p->proto, .kind = KIND_LOOP_RETURN, .dir = DIR_INGRESS};
    if (p->v4) ((__u32 *)k.addr)[2] = bpf_htonl(0xffff);
    count(&k, skb);
  } else if (local_flags(p, 1) & LOCAL_POD) {
    struct ctr_key k = {.port = p->dport, .proto = p->proto, .kind = KIND_LOOP_RETURN, .dir = DIR_INGRESS};
    key_addr(&k, p, 1);
    count(&k, skb);
  }
}

SEC("tc")
int clbp_ingress(struct __sk_buff *skb) {
  void *data = (void *)(long)skb->data;
  void *end = (void *)(long)skb->data_end;
  struct pkt p;
  __u32 src;
  __u8 v4;
  if (skb->protocol == bpf_htons(ETH_P_IP)) {
    v4 = 1;
    const struct iphdr *ip = data + L2_LEN;
    if ((void *)(ip + 1) > end) goto copy;
    // Source first: most packets from the uplink come from elsewhere.
    src = local_flags4(ip->saddr);
    if (!src) return TC_ACT_UNSPEC;
    struct pkt q;
    int r = rest4(ip, end, &q);
    if (r > 0) goto copy;
    if (r == 0) ingress_count(skb, &q, src);
    return TC_ACT_UNSPEC;
  }
  if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
    v4 = 0;
    const struct ipv6hdr *ip = data + L2_LEN;
    if ((void *)(ip + 1) > end) goto copy;
    src = local_flags6(ip->saddr.in6_u.u6_addr32);
    if (!src) return TC_ACT_UNSPEC;
    struct pkt q;
    int r = rest6(ip, end, &q);
    if (r > 0) goto copy;
    if (r == 0) ingress_count(skb, &q, src);
    return TC_ACT_UNSPEC;
  }
  return TC_ACT_UNSPEC;  // not IP: nothing to count
copy:
  p.v4 = v4;
  if (parse_copy(skb, &p) < 0) return TC_ACT_UNSPEC;
  src = local_flags(&p, 0);
  if (src) ingress_count(skb, &p, src);
  return TC_ACT_UNSPEC;
}

// Same licence as the project; the program calls no GPL-only helper.
char LICENSE[] SEC("license") = "Apache-2.0";
