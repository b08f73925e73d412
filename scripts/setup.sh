#!/usr/bin/env bash
# Idempotent set-up of clbprobe on Debian/Ubuntu, as root: installs the apt
# packages that are missing, runs `npm ci` when the lockfile changed, and builds
# (native addon + TypeScript) when sources are newer than the build.
#   scripts/setup.sh        everything the tests need (default)
#   scripts/setup.sh run    only what running clbprobe needs
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-test}

run_pkgs=(iproute2 iptables ipset conntrack procps nftables)
build_pkgs=(make g++ python3 clang llvm libbpf-dev libelf-dev zlib1g-dev libpcap-dev)
# qemu + busybox + kmod + xz boot Debian's kernel for the IPVS tests (test/vm);
# ipvsadm checks our IPVS reader there; prometheus scrapes the agent end to end;
# chromium renders the diagnosis page as a person sees it (test/e2e/report-html.test.ts);
# containerd, runc and the CNI plugins run the real kubelet nodes of test/e2e/kubelet.test.ts.
test_pkgs=(qemu-system-x86 busybox-static kmod xz-utils ipvsadm tcpdump prometheus time openssl chromium
           containerd runc containernetworking-plugins gcc libc6-dev)
pkgs=("${run_pkgs[@]}" "${build_pkgs[@]}")
[ "$mode" = test ] && pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "setup: need root to install: ${missing[*]}" >&2; exit 2; }
  echo "setup: installing ${missing[*]}" >&2
  # Several set-ups may run at once (parallel test suites, CI steps): wait for dpkg's lock.
  apt-get -o DPkg::Lock::Timeout=900 update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" >&2
fi

if ! cmp -s package-lock.json node_modules/.package-lock.json 2>/dev/null && \
   ! [ node_modules/.package-lock.json -nt package-lock.json ]; then
  echo "setup: npm ci" >&2
  npm ci --no-audit --no-fund >&2
fi

# Rebuild when any source is newer than the last build's stamp.
stamp=dist/.build-stamp
if [ ! -f "$stamp" ] || [ -n "$(find src native bench scripts/bundle.mjs binding.gyp package.json tsconfig*.json -newer "$stamp" -print -quit 2>/dev/null)" ]; then
  echo "setup: building" >&2
  npm run --silent build >&2
  touch "$stamp"
fi

# The image test's container engine and base images (slow the first time: cached under /var/cache).
if [ "$mode" = test ]; then bash scripts/setup-image.sh; fi

# Real Kubernetes pieces for the tests (kube-apiserver and kube-proxy v1.20.2 from Debian's source,
# etcd, kubectl): built once into /var/cache/clbprobe-kube, a few seconds when cached.
if [ "$mode" = test ]; then
  bash scripts/setup-kube.sh
fi
