# Guest side of test/vm/kube-proxy-ipvs.test.ts (root inside the VM, cwd = the
# project root). The VM itself is node1: real kube-proxy v1.20.2 in IPVS mode
# runs in its root namespace against the host's kube-apiserver, reached through
# the virtio-serial API bridge (test/vm/api-bridge.ts); the pods and the LB are
# namespaces made here, wired as the loop lab (src/demo/lab.ts) wires them:
#   client pod 10.244.1.10, server pod 10.244.1.20:8080  -- cni0 bridge (10.244.1.1/24) on node1
#   node1 eth0 10.0.1.11/24  -- veth --  LB namespace n1 10.0.1.1/24
# The LB DNATs VIP:80 to node1:NodePort and never SNATs; it also health-checks
# node1 from the VIP, as Tencent CLB does.
# Env from the test: KUBE_PROXY (binary), PROXY_KUBECONFIG (system:kube-proxy),
# AGENT_KUBECONFIG (deploy/rbac.yaml's ServiceAccount), API_PORT (guest port of
# the bridge), VIP, VIP_CLUSTER, NODE_PORT, HC_PORT, HAND_DIR (the demo's node1
# rules: nat.rules, ipsets.save).
# Output: sections between "=== name" lines (test/vm/vm.ts sections()).
set -eu
t0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - t0) / 1000000 )); }
# Each section's start, in ms since the script started, printed at the end.
marks=
section() { echo "=== $1"; marks="$marks $1@$(ms)"; }
T=$(mktemp -d)
clbprobe() { node dist/src/cli/main.js "$@"; }
ns() { ip netns exec "$@"; }

# Before anything is made here: no interface backed by a device (qemu runs
# with -nic none), so no packet of this VM can leave it.
section guest-links; for d in /sys/class/net/*; do echo "${d##*/} $([ -e "$d/device" ] && echo device || echo virtual)"; done

# The bridge to the host's API server: the guest's only way out.
node test/vm/api-bridge-guest.mjs /dev/virtio-ports/clbvm.api "$API_PORT" > "$T/bridge.out" 2> "$T/bridge.err" &
bridge=$!

# node1 and its pods.
# A bridge CNI needs bridged pod-to-pod traffic to pass netfilter (kubeadm
# checks for it): else a reply between two pods of the bridge skips IPVS.
ip link add cni0 type bridge
sysctl -qw net.bridge.bridge-nf-call-iptables=1
ip addr add 10.244.1.1/24 dev cni0
ip link set cni0 up
for p in client:10.244.1.10 server:10.244.1.20; do
  name=cbkv-${p%%:*}
  ip netns add "$name"
  ip link add "veth-${p%%:*}" type veth peer name eth0 netns "$name"
  ip link set "veth-${p%%:*}" master cni0 up
  ns "$name" ip link set lo up
  ns "$name" ip link set eth0 up
  ns "$name" ip addr add "${p#*:}/24" dev eth0
  ns "$name" ip route add default via 10.244.1.1
done
# rp_filter off on node1 (cloud nodes run loose or off): the looped packet, a
# local pod source arriving from the uplink, is accepted. Martians are logged.
sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 net.ipv4.conf.all.log_martians=1
ip netns add cbkv-lb
ip link add eth0 type veth peer name n1 netns cbkv-lb
ip addr add 10.0.1.11/24 dev eth0
ip link set eth0 up
sysctl -qw net.ipv4.conf.eth0.rp_filter=0
ip route add default via 10.0.1.1
ns cbkv-lb ip link set lo up
ns cbkv-lb ip link set n1 up
ns cbkv-lb ip addr add 10.0.1.1/24 dev n1
# The VIPs are the LB's own addresses: its health checks leave from them.
ns cbkv-lb ip addr add "$VIP/32" dev lo
ns cbkv-lb ip addr add "$VIP_CLUSTER/32" dev lo
ns cbkv-lb ip route add 10.244.1.0/24 via 10.0.1.11
# arp_announce=2: the LB's ARP requests name its address on the link, never
# the VIP a health check leaves from (node1 would drop an ARP request from its
# own kube-ipvs0 address as a martian too, and the LB would lose node1's MAC).
ns cbkv-lb sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
  net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.n1.send_redirects=0 net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.n1.arp_announce=2
ns cbkv-lb iptables -t nat -A PREROUTING -i n1 -d "$VIP" -p tcp --dport 80 -j DNAT --to-destination "10.0.1.11:$NODE_PORT"

# The server pod greets every connection.
ns cbkv-server busybox nc -ll -p 8080 -e echo server-pod &

for i in $(seq 100); do [ -s "$T/bridge.out" ] && break; sleep 0.2; done
section bridge; cat "$T/bridge.out" "$T/bridge.err"

# Real kube-proxy, IPVS mode. --ipvs-sync-period=1h: after its first syncs it
# rewrites the datapath only when a Service or EndpointSlice changes (none does
# below), so the TKE scenario can take the LB IP off kube-ipvs0 and it stays off.
# Conntrack tuning off (--conntrack-max-per-core=0, timeouts 0), as in the iptables-mode tests.
"$KUBE_PROXY" --proxy-mode=ipvs --kubeconfig="$PROXY_KUBECONFIG" --hostname-override=node1 \
  --cluster-cidr=10.244.0.0/16 --ipvs-sync-period=1h --ipvs-scheduler=rr \
  --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
  --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 --v=2 > "$T/kube-proxy.log" 2>&1 &
proxy=$!
trap 'kill $proxy $bridge 2>/dev/null || true' EXIT

ready=
for i in $(seq 300); do
  if ipvsadm -Ln -t "$VIP:80" 2>/dev/null | grep -q 10.244.1.20 && ipvsadm -Ln -t "$VIP_CLUSTER:80" 2>/dev/null | grep -q 10.244.1.20 \
    && ip -o addr show dev kube-ipvs0 | grep -q " $VIP/32" && ss -ltn | grep -q ":$HC_PORT "; then ready=1; break; fi
  kill -0 $proxy 2>/dev/null || break
  sleep 0.5
done
section kube-proxy-ready; echo "${ready:-no} $(ms) ms"
if [ -z "$ready" ]; then # The demo's hand-written IPVS-mode node1 (src/demo/lab.ts), loaded into a
# namespace of its own and saved by the same tools, for the normalised diff.
ip netns add cbkv-hand
ns cbkv-hand ipset restore < "$HAND_DIR/ipsets.save"
ns cbkv-hand iptables-restore < "$HAND_DIR/nat.rules"
section hand-nat; ns cbkv-hand iptables-save -t nat
section hand-ipset; ns cbkv-hand ipset save
section kube-proxy-log; tail -60 "$T/kube-proxy.log"; exit 1; fi
# One more sync period of quiet so the state read below is settled.
sleep 2

# Scenario 1: community IPVS mode, the LB IP bound on kube-ipvs0.
# clbprobe's readers (genl IPVS, rtnetlink addresses, ipset, iptables) next to
# the tools' own views; the ipvsadm views are those test/unit/ipvs/same-table.ts compares.
section rate-before; ipvsadm -Ln --rate --exact
section snapshot; clbprobe snapshot --json
section rate-after; ipvsadm -Ln --rate --exact
section list; ipvsadm -Ln
section stats; ipvsadm -Ln --stats --exact
section thresholds; ipvsadm -Ln --thresholds
section persistent-conn; ipvsadm -Ln --persistent-conn
section tun-info; ipvsadm -Ln --tun-info
section save; ipvsadm-save -n
section kube-ipvs0-link; ip -o link show dev kube-ipvs0
section bound-addresses; ip -o addr show dev kube-ipvs0
section ipset; ipset save
section nat; iptables-save -t nat
section bound-connect; ns cbkv-client timeout 20 bash -c "exec 3<>/dev/tcp/$VIP/80 && cat <&3" 2>&1 || echo "exit $?"
# The LB's health check: from the VIP (dropped as a martian), then from its own address (answered).
# in_martian_src is the 8th column of /proc/net/stat/rt_cache (hex, one line per CPU).
martians() {
  local n=0 a
  while read -r -a a; do [ "${a[0]}" = entries ] || n=$((n + 16#${a[7]})); done < /proc/net/stat/rt_cache
  echo "$n"
}
m0=$(martians)
section bound-hc-vip; ns cbkv-lb curl -sS -m 4 --interface "$VIP" "http://10.0.1.11:$HC_PORT/" 2>&1 || echo "exit $?"
section bound-martians; echo "in_martian_src +$(( $(martians) - m0 ))"; dmesg | grep -i 'martian source' | tail -3 || true
section bound-hc-lb; ns cbkv-lb curl -sS -m 6 --interface 10.0.1.1 -w '\nHTTP %{http_code}\n' "http://10.0.1.11:$HC_PORT/" 2>&1 || echo "exit $?"
section bound-lb-neigh; ns cbkv-lb ip neigh show dev n1
section bound-diagnose; rc=0; clbprobe diagnose --kubeconfig "$AGENT_KUBECONFIG" --node-name node1 --json 2>"$T/diag1.err" || rc=$?
section bound-diagnose-exit; echo "$rc"; cat "$T/diag1.err"

# Scenario 2: the TKE behaviour, the LB IP not bound. Made by hand: kube-proxy
# would put it back at its next sync, an hour away.
ip addr del "$VIP/32" dev kube-ipvs0
conntrack -F 2>/dev/null || true
section unbound-addresses; ip -o addr show dev kube-ipvs0
section unbound-hc-vip; ns cbkv-lb curl -sS -m 6 --interface "$VIP" -w '\nHTTP %{http_code}\n' "http://10.0.1.11:$HC_PORT/" 2>&1 || echo "exit $?"
# The client pod keeps calling the LB IP (each try 2 s, as an application
# retrying would) while conntrack and diagnose look: every try is a fresh loop,
# so its two conntrack legs exist whenever they are read. Stopped after diagnose.
ip netns exec cbkv-client bash -c "for i in \$(seq 200); do timeout 2 bash -c 'exec 3<>/dev/tcp/$VIP/80 && cat <&3' && echo connected || echo \"try \$i: exit \$?\"; done" > "$T/connect" 2>&1 &
client=$!
sleep 3
section unbound-conntrack; conntrack -L 2>/dev/null | grep -E "$VIP|10\.0\.1\.11.*dport=$NODE_PORT" || true
section unbound-diagnose; rc=0; clbprobe diagnose --kubeconfig "$AGENT_KUBECONFIG" --node-name node1 --json 2>"$T/diag2.err" || rc=$?
section unbound-diagnose-exit; echo "$rc"; cat "$T/diag2.err"
section unbound-still-unbound; ip -o addr show dev kube-ipvs0
kill $client 2>/dev/null || true
section unbound-connect; cat "$T/connect"
# The demo's hand-written IPVS-mode node1 (src/demo/lab.ts), loaded into a
# namespace of its own and saved by the same tools, for the normalised diff.
ip netns add cbkv-hand
ns cbkv-hand ipset restore < "$HAND_DIR/ipsets.save"
ns cbkv-hand iptables-restore < "$HAND_DIR/nat.rules"
section hand-nat; ns cbkv-hand iptables-save -t nat
section hand-ipset; ns cbkv-hand ipset save
section kube-proxy-log; grep -vE 'flags.go|^\s' "$T/kube-proxy.log" | head -60 || true
section timing; echo "$marks end@$(ms)" | tr ' ' '\n' | sed '/^$/d'
echo "=== end"
