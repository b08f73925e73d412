#!/usr/bin/env bash
# One Kubernetes node (containerd, kubelet, kube-proxy) started by test/support/kube-node.ts as
#   nsenter --net=NODE_NETNS unshare -m --propagation private bash kube-node-inside.sh
# so every mount below lives in a private mount namespace that dies with the node's processes.
# Env: S (the node's state dir), NODE, NODE_IP, CLUSTER_CIDR, KUBE_BIN, IMAGES (docker-archives, space-separated).
set -euo pipefail
export PATH=$KUBE_BIN:/usr/sbin:/usr/bin:/sbin:/bin
SOCK=$S/containerd/containerd.sock

# A sysfs of this network namespace (kube-proxy and cAdvisor read /sys/class/net), with the host's
# cgroup mounts carried over (ip netns exec would lose them).
mkdir -p "$S/cgmnt"
mount --rbind /sys/fs/cgroup "$S/cgmnt"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount --move "$S/cgmnt" /sys/fs/cgroup
# Paths containerd, libcni and the kubelet hard-code: /run (shim sockets, pod netns, hostPath
# /run/clbprobe), /var/lib (/var/lib/cni; /var/lib/kubelet, where the DaemonSet's seccomp hostPath
# points) and /var/log (/var/log/pods) become this node's own.
mount -t tmpfs -o mode=755 tmpfs /run
mount --bind "$S/log" /var/log
mount -t tmpfs -o mode=755 tmpfs /var/lib
mkdir /var/lib/kubelet
mount --bind "$S/kubelet" /var/lib/kubelet
# The kubelet writes these machine-wide sysctls unless they already hold its values: files with them, bound over.
for f in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
  mount --bind "$S/sysctl/${f##*/}" "/proc/sys/$f"
done

start() {
  local n=$1
  shift
  "$@" >"$S/logs/$n.log" 2>&1 &
  echo $! >"$S/pids/$n"
}

start containerd containerd --config "$S/containerd.toml"
for _ in $(seq 300); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { echo "no containerd socket after 30 s" >&2; exit 1; }
for img in $IMAGES; do
  ctr --address "$SOCK" -n k8s.io images import "$img" >>"$S/logs/import.log" 2>&1
done
touch "$S/imported"

# AWS_EC2_METADATA_DISABLED: the in-tree ECR credential provider would probe 169.254.169.254 and stall ~6 s.
start kubelet env AWS_EC2_METADATA_DISABLED=true kubelet --config="$S/kubelet.yaml" --kubeconfig="$S/kubelet.kubeconfig" \
  --containerd="$SOCK" --container-runtime=remote --container-runtime-endpoint="unix://$SOCK" \
  --root-dir=/var/lib/kubelet --cert-dir="$S/kubelet-pki" --volume-plugin-dir="$S/kubelet-plugins" \
  --hostname-override="$NODE" --node-ip="$NODE_IP" --v=1
start kube-proxy kube-proxy --kubeconfig="$S/proxy.kubeconfig" --hostname-override="$NODE" --proxy-mode=iptables \
  --cluster-cidr="$CLUSTER_CIDR" --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 \
  --conntrack-tcp-timeout-close-wait=0 --oom-score-adj=0 --healthz-bind-address=127.0.0.1:10256 \
  --metrics-bind-address=127.0.0.1:10249 --v=1
wait
