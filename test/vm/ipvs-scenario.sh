# Guest side of test/vm/ipvs.test.ts (runs as root inside the VM, cwd = the
# project root): builds an IPVS table shaped like kube-proxy's on a node, makes
# a little traffic through it so the counters are not all zero, then prints the
# views the test compares, each between "=== name" markers:
#   reader                 JSON of readIpvs() and its raw replies (test/vm/ipvs-read.mjs)
#   reader-unprivileged    the same as uid 65534 without capabilities
#   list, stats, thresholds, persistent-conn, tun-info, save, rate-before/after
#                          ipvsadm -Ln [--stats --exact | --thresholds | ...], ipvsadm-save -n
set -eu

# kube-proxy's dummy device holding ClusterIPs and LB IPs (v4 and v6).
ip link add kube-ipvs0 type dummy
for a in 10.96.0.10/32 10.96.0.11/32 192.0.2.10/32; do ip addr add "$a" dev kube-ipvs0; done
ip -6 addr add fd00:96::10/128 dev kube-ipvs0 nodad
ip link set kube-ipvs0 up

# One "pod" namespace holding every real server address, behind a veth.
ip netns add cbv-pod
ip link add cbv-h type veth peer name eth0 netns cbv-pod
ip addr add 10.244.0.1/16 dev cbv-h
ip -6 addr add fd00:244::1/64 dev cbv-h nodad
ip link set cbv-h up
ip -n cbv-pod link set lo up
ip -n cbv-pod link set eth0 up
for a in 10.244.1.2/16 10.244.2.3/16 10.244.3.4/16; do ip -n cbv-pod addr add "$a" dev eth0; done
for a in fd00:244::2/64 fd00:244::3/64; do ip -n cbv-pod -6 addr add "$a" dev eth0 nodad; done
ip -n cbv-pod route add default via 10.244.0.1
ip -n cbv-pod -6 route add default via fd00:244::1
ip netns exec cbv-pod busybox nc -ll -p 8080 -e cat &
ip netns exec cbv-pod busybox nc -ll -p 8443 -e cat &

# ClusterIP, round robin, NAT to two pods.
ipvsadm -A -t 10.96.0.10:80 -s rr
ipvsadm -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
ipvsadm -a -t 10.96.0.10:80 -r 10.244.2.3:8080 -m -w 1
# LB IP, weighted, persistent with a netmask (session affinity), one drained server, thresholds.
ipvsadm -A -t 192.0.2.10:443 -s wrr -p 600 -M 255.255.255.0
ipvsadm -a -t 192.0.2.10:443 -r 10.244.1.2:8443 -m -w 3 -x 100 -y 50
ipvsadm -a -t 192.0.2.10:443 -r 10.244.2.3:8443 -m -w 0
# DNS-like UDP, source hashing with scheduler flags.
ipvsadm -A -u 10.96.0.10:53 -s sh -b sh-fallback,sh-port
ipvsadm -a -u 10.96.0.10:53 -r 10.244.1.2:53 -m -w 1
ipvsadm -a -u 10.96.0.10:53 -r 10.244.3.4:53 -m -w 2
# One-packet scheduling (UDP only).
ipvsadm -A -u 192.0.2.10:5353 -s rr -o
ipvsadm -a -u 192.0.2.10:5353 -r 10.244.3.4:5353 -m
# SCTP.
ipvsadm -A --sctp-service 10.96.0.11:3868 -s rr
ipvsadm -a --sctp-service 10.96.0.11:3868 -r 10.244.1.2:3868 -m -w 4
# Firewall marks: direct routing and IPIP/GUE tunnels; a local real server.
ipvsadm -A -f 42 -s rr
ipvsadm -a -f 42 -r 10.244.1.2:0 -g -w 1
ipvsadm -a -f 42 -r 10.244.3.4:0 -i -w 5
ipvsadm -a -f 42 -r 10.244.2.3:0 -i --tun-type gue --tun-port 6080 -w 2
ipvsadm -a -f 42 -r 10.96.0.11:0 -g -w 1
ipvsadm -A -f 43 -6 -s wrr -p
ipvsadm -a -f 43 -6 -r fd00:244::2 -g -w 2
# IPv6 ClusterIP.
ipvsadm -A -t '[fd00:96::10]:80' -s wrr
ipvsadm -a -t '[fd00:96::10]:80' -r '[fd00:244::2]:8080' -m -w 2
ipvsadm -a -t '[fd00:96::10]:80' -r '[fd00:244::3]:8080' -m -w 1

# Traffic: one connection held open (ActiveConn), short ones (InActConn after
# close), UDP datagrams, IPv6. Give the echo servers a moment to listen.
sleep 0.5
sleep 60 | busybox nc 10.96.0.10 80 > /dev/null &
for i in 1 2 3; do echo "hello $i" | timeout 3 busybox nc -w 1 10.96.0.10 80 > /dev/null || true; done
echo tls | timeout 3 busybox nc -w 1 192.0.2.10 443 > /dev/null || true
for i in 1 2; do echo q > /dev/udp/10.96.0.10/53; done
echo six | timeout 3 busybox nc -w 1 fd00:96::10 80 > /dev/null || true
# Rates are kernel estimates refreshed every 2 s; once the first refresh after
# the traffic has happened they only decay, so the reader's rates must lie
# between the two --rate views taken around it.
sleep 2.5

echo "=== rate-before"; ipvsadm -Ln --rate --exact
echo "=== reader"; node test/vm/ipvs-read.mjs
echo "=== list"; ipvsadm -Ln
echo "=== stats"; ipvsadm -Ln --stats --exact
echo "=== thresholds"; ipvsadm -Ln --thresholds
echo "=== persistent-conn"; ipvsadm -Ln --persistent-conn
echo "=== tun-info"; ipvsadm -Ln --tun-info
echo "=== save"; ipvsadm-save -n
echo "=== rate-after"; ipvsadm -Ln --rate --exact
# Without CAP_NET_ADMIN the reader must say so, not fail.
echo "=== reader-unprivileged"; setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all node test/vm/ipvs-read.mjs
echo "=== end"
