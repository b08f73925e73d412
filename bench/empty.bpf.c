// The reference of bench/capture.ts: a tc program that does nothing, attached
// to the same hook of the same veth as ours and driven by the same traffic in
// the same run. Its cost is the floor (the hook itself plus bpf_stats' clock
// reads); ours is reported as a ratio to it.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int clbp_empty(struct __sk_buff *skb) {
  return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Apache-2.0";
