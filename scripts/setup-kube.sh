#!/usr/bin/env bash
# Builds the real Kubernetes pieces the tests run (kube-apiserver, kube-proxy, kubelet,
# kube-controller-manager and kube-scheduler v1.20.2 from Debian bookworm's `kubernetes`
# source package, with Debian's Go),
# and gathers etcd and kubectl from Debian's packages. Idempotent: everything lands
# in $KUBE_CACHE (default /var/cache/clbprobe-kube) and a piece is rebuilt only
# when it is missing. Prints how long each step took.
#   scripts/setup-kube.sh          build what is missing
#   scripts/setup-kube.sh --print  print the cache directory and exit
# Result: $KUBE_CACHE/bin/{kube-apiserver,kube-proxy,kubelet,kube-controller-manager,kube-scheduler,kubectl,etcd}
set -euo pipefail
C=${KUBE_CACHE:-/var/cache/clbprobe-kube}
[ "${1:-}" = --print ] && { echo "$C"; exit 0; }
[ "$(id -u)" = 0 ] || { echo "setup-kube: needs root" >&2; exit 2; }
mkdir -p "$C/bin"
# Two set-ups at once (parallel suites, CI steps) share one build.
exec 9>"$C/.lock"; flock 9

VERSION=v1.20.2
t0=$(date +%s)
step() { local now; now=$(date +%s); echo "setup-kube: $1 ($((now - t0)) s since start)" >&2; }
apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 -q "$@" >&2; }

built=(kube-apiserver kube-proxy kubelet kube-controller-manager kube-scheduler)
all=1
for b in "${built[@]}" kubectl etcd; do [ -x "$C/bin/$b" ] || all=; done
[ -n "$all" ] && exit 0

# 1. Debian packages: the Go toolchain, etcd, reflect2 1.0.2 (see below).
pkgs=(golang-go etcd-server golang-github-modern-go-reflect2-dev dpkg-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
need_update=
if ! grep -rqsE '^(deb-src .*debian/? bookworm .*main|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  # The source package needs a deb-src entry; a separate file keeps the machine's own lists untouched.
  cat > /etc/apt/sources.list.d/clbprobe-deb-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  need_update=1
fi
if [ ${#missing[@]} -gt 0 ] || [ -n "$need_update" ]; then
  apt_get update
fi
# 2. The source tree (34 MB, with its whole vendor/ tree); needs no dpkg lock, so it comes first.
src="$C/src/kubernetes"
if [ ! -f "$src/.unpacked" ]; then
  rm -rf "$C/src"; mkdir -p "$C/src"
  (cd "$C/src" && apt-get -q source kubernetes >&2)
  d=$(find "$C/src" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -1)
  [ -n "$d" ] || { echo "setup-kube: apt-get source kubernetes unpacked nothing" >&2; exit 1; }
  mv "$d" "$src"
  touch "$src/.unpacked"
  step "source unpacked ($(du -sh "$src" | cut -f1))"
fi

if [ ${#missing[@]} -gt 0 ]; then
  apt_get install -y --no-install-recommends "${missing[@]}"
  step "installed ${missing[*]}"
fi
ln -sf /usr/bin/etcd "$C/bin/etcd"

# 3. kubectl 1.20 from kubernetes-client, unpacked (not installed): /usr/bin/kubectl
#    may belong to another package (a cloud SDK's newer kubectl) on this machine.
if [ ! -x "$C/bin/kubectl" ]; then
  tmp=$(mktemp -d "$C/kubectl.XXXX")
  (cd "$tmp" && apt-get -q download kubernetes-client >&2 && dpkg -x kubernetes-client_*.deb x)
  install -m 755 "$tmp/x/usr/bin/kubectl" "$C/bin/kubectl"
  rm -rf "$tmp"
  step "kubectl unpacked: $("$C/bin/kubectl" version --client --short 2>/dev/null || true)"
fi

# 4. Build in GOPATH mode, as Kubernetes 1.20's own build did: module mode with
#    -mod=vendor fails with Go 1.19 ("updates to go.mod needed").
# Vendored reflect2 1.0.1 makes the apiserver fault in mapiterinit on the first JSON map
# under Go >= 1.18; Debian's 1.0.2 fixes it.
r2=vendor/github.com/modern-go/reflect2
if ! cmp -s "$src/$r2/reflect2.go" /usr/share/gocode/src/github.com/modern-go/reflect2/reflect2.go; then
  rm -rf "${src:?}/$r2"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$src/$r2"
  step "reflect2 1.0.2 swapped in"
fi
export GOPATH="$C/gopath" GO111MODULE=off GOFLAGS= GOCACHE="$C/gocache" CGO_ENABLED=0
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$src" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"
go version >&2

# kube-apiserver needs pkg/generated/openapi/zz_generated.openapi.go, which the tarball lacks:
# generate it with the vendored openapi-gen over every package tagged +k8s:openapi-gen.
openapi=pkg/generated/openapi/zz_generated.openapi.go
if [ ! -s "$openapi" ]; then
  go build -o "$C/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  # The packages Kubernetes 1.20's Makefile.generated_files feeds it for pkg/generated/openapi: every
  # Go file of the tree (staging/src named as vendor/, the rest of vendor/ left out) with a
  # `// +k8s:` tag line and an openapi-gen tag, but not code-generator's and sample-apiserver's.
  dirs=$(set +o pipefail; find -H . -not \( \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune \) -type f -name '*.go' |
           sed 's|^\./staging/src|vendor|; s|^\./||' | xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' |
           xargs -n1 dirname | grep -vE '^vendor/k8s.io/(code-generator|sample-apiserver)/' |
           sed 's|^|k8s.io/kubernetes/|' | LC_ALL=C sort -u | paste -sd, -)
  [ -n "$dirs" ] || { echo "setup-kube: no +k8s:openapi-gen packages found" >&2; exit 1; }
  "$C/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$C/openapi-violations.list" >&2
  step "openapi generated"
fi

# -X stamps: what `--version` and the API's /version report.
pkgv=k8s.io/component-base/version
cgov=k8s.io/client-go/pkg/version
ld=""
for p in "k8s.io/kubernetes/vendor/$pkgv" "k8s.io/kubernetes/vendor/$cgov"; do
  ld+=" -X $p.gitVersion=$VERSION -X $p.gitMajor=1 -X $p.gitMinor=20 -X $p.gitTreeState=clean"
  ld+=" -X $p.buildDate=1970-01-01T00:00:00Z -X $p.gitCommit=debian-bookworm"
done
for cmd in "${built[@]}"; do
  if [ ! -x "$C/bin/$cmd" ]; then
    go build -tags notest -ldflags "-s -w$ld" -o "$C/bin/$cmd.tmp" "./cmd/$cmd"
    mv "$C/bin/$cmd.tmp" "$C/bin/$cmd"
    step "$cmd built: $("$C/bin/$cmd" --version 2>/dev/null || true)"
  fi
done
step done
