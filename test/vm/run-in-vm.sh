#!/usr/bin/env bash
# run-in-vm.sh SCRIPT
#   Runs the shell text SCRIPT as root in a throwaway qemu VM that boots Debian's
#   linux-image-amd64 kernel (which has IPVS and the dummy link type as modules,
#   unlike the CI kernel). The guest's root fs is this machine's / shared
#   read-only over 9p with a tmpfs overlay on top (writes are discarded), plus
#   the current directory shared read-write at the same path, so the host's
#   node, ipvsadm, iproute2 and the project's dist/ run unchanged inside.
#   The guest has no network interface besides lo.
#
#   Output: the script's stdout on stdout, its stderr on stderr; exit status is
#   the script's, or 125 when the VM itself failed (boot error, timeout), in
#   which case the tail of the guest kernel console is printed on stderr.
#
# Needs (scripts/setup.sh installs them): qemu-system-x86 busybox-static kmod
# xz-utils, and apt sources able to `apt-get download` linux-image-amd64.
# The first run downloads and unpacks that kernel package (~70 MB, never
# installed) and builds a busybox initramfs into $CLBVM_CACHE/<key>, keyed by
# this script's text; later runs only boot (~6 s under TCG).
#
# Env: CLBVM_KERNEL (unset: the machine's own linux-image-amd64; 5.10, 6.1 or 6.12: the
#        linux-image-amd64 of Debian bullseye, bookworm or bookworm-backports, looked up
#        through apt lists of its own under $CLBVM_CACHE/apt-<kernel>, never the machine's)
#      CLBVM_CACHE (/var/cache/clbprobe-vm)  CLBVM_TIMEOUT (seconds, 300)
#      CLBVM_MEM (MiB, 1536)  CLBVM_CPUS (2)  CLBVM_ACCEL (auto|tcg|kvm)
#      CLBVM_MODULES (modprobe'd in the guest before SCRIPT)
#      CLBVM_DEBUG=1 (print the whole guest kernel console on stderr afterwards)
#      CLBVM_PORTS="NAME=SOCKET ..." one virtio-serial port per pair: qemu connects to the
#        host Unix socket SOCKET (which must already listen) and the guest sees the byte
#        stream as /dev/virtio-ports/NAME. It is the guest's only way out, to whatever
#        the host side of that socket chooses to reach (test/vm/api-bridge.ts).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 'shell script text'" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run-in-vm: must run as root (9p share of / and module cache)" >&2; exit 125; }
command -v qemu-system-x86_64 >/dev/null || { echo "run-in-vm: qemu-system-x86_64 not installed; run scripts/setup.sh" >&2; exit 125; }

self=$(readlink -f "$0")
root=${CLBVM_CACHE:-/var/cache/clbprobe-vm}
# Keyed on the text of the preparation only (between the cache-key markers):
# changing how a VM runs does not cost a new kernel download.
kernel=${CLBVM_KERNEL:-}
case $kernel in
  '') suites= ;;
  5.10) suites='debian bullseye|debian-security bullseye-security' ;;
  6.1) suites='debian bookworm|debian-security bookworm-security' ;;
  6.12) suites='debian bookworm-backports' ;;
  *) echo "run-in-vm: CLBVM_KERNEL=$kernel: expected 5.10, 6.1 or 6.12" >&2; exit 125 ;;
esac
key=$(sed -n '/^# cache-key: begin$/,/^# cache-key: end$/p' "$self" | cksum | cut -d' ' -f1)
cache=$root/$key${kernel:+-$kernel}

# A named kernel's suite gets apt lists and caches of its own: the machine's
# sources and package cache stay as they are.
apt_opts=()
if [ -n "$suites" ]; then
  priv=$root/apt-$kernel
  apt_opts=(-o "Dir::Etc::SourceList=$priv/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$priv/lists" -o "Dir::Cache=$priv/cache" -o APT::Sandbox::User=root)
fi

# The kernel package name changes with every Debian kernel ABI bump; the
# metapackage's dependency names the current one (the newest, with several suites).
kernel_pkg() {
  { apt-cache "${apt_opts[@]}" depends linux-image-amd64 2>/dev/null || true; } | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | sort -V | tail -1
}
apt_update() {
  if [ -n "$suites" ]; then
    mkdir -p "$priv/lists/partial" "$priv/cache/archives/partial"
    echo "$suites" | tr '|' '\n' | while read -r dir suite; do
      echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/$dir $suite main"
    done > "$priv/sources.list"
  fi
  apt-get -q "${apt_opts[@]}" update >&2
}

# cache-key: begin
# One-time preparation into a temporary sibling, renamed into place when complete.
prepare() (
  tmp=$(mktemp -d "$cache.tmp.XXXX")
  trap 'rm -rf "$tmp"' EXIT
  chmod 755 "$tmp"
  pkg=$(kernel_pkg)
  if [ -z "$pkg" ]; then apt_update; pkg=$(kernel_pkg); fi
  [ -n "$pkg" ] || { echo "run-in-vm: apt knows no linux-image-amd64 dependency${kernel:+ in $suites}" >&2; exit 1; }
  (cd "$tmp" && { apt-get -q "${apt_opts[@]}" -o APT::Sandbox::User=root download "$pkg" >&2 || { apt_update && apt-get -q "${apt_opts[@]}" -o APT::Sandbox::User=root download "$pkg" >&2; }; })
  dpkg -x "$tmp"/"$pkg"_*.deb "$tmp/k"
  rm -f "$tmp"/*.deb
  # Packages built for merged /usr ship their modules there; depmod -b looks under lib/.
  if [ ! -d "$tmp/k/lib/modules" ] && [ -d "$tmp/k/usr/lib/modules" ]; then mkdir -p "$tmp/k/lib"; mv "$tmp/k/usr/lib/modules" "$tmp/k/lib/"; fi
  ver=$(ls "$tmp/k/lib/modules")
  depmod -b "$tmp/k" "$ver" # dpkg -x does not run the postinst that makes modules.dep

  # Boot the uncompressed vmlinux through its PVH entry: under TCG this skips
  # ~4 s of the bzImage's own decompressor. It is the first xz stream in vmlinuz
  # (zstd in newer kernels); a kernel compressed otherwise boots as the bzImage.
  z=$tmp/k/boot/vmlinuz-$ver
  off=$( { LC_ALL=C grep -abo $'\xfd7zXZ' "$z" || true; } | LC_ALL=C sed -n 's/:.*//p;T;q')
  zoff=$( { LC_ALL=C grep -abo $'\x28\xb5\x2f\xfd' "$z" || true; } | LC_ALL=C sed -n 's/:.*//p;T;q')
  if [ -n "$off" ]; then
    tail -c +$((off + 1)) "$z" > "$tmp/vmlinux.z" # (a pipe would end in SIGPIPE)
    xz -dc --single-stream "$tmp/vmlinux.z" > "$tmp/vmlinux"
  elif [ -n "$zoff" ]; then
    tail -c +$((zoff + 1)) "$z" > "$tmp/vmlinux.z"
    zstd -qdc "$tmp/vmlinux.z" > "$tmp/vmlinux" 2>/dev/null || true # the bzImage's trailer follows the frame
  fi
  [ "$(head -c 4 "$tmp/vmlinux" 2>/dev/null)" = $'\x7fELF' ] || cp "$z" "$tmp/vmlinux"
  rm -f "$tmp/vmlinux.z"

  # Initramfs: static busybox plus the modules needed to reach the 9p root
  # (virtio-pci, 9p, overlay are modules in Debian's kernel) and the consoles.
  mkdir -p "$tmp/ir/bin" "$tmp/ir/mod"
  cp /bin/busybox "$tmp/ir/bin/"
  for m in virtio_pci 9pnet_virtio 9p overlay virtio_console; do
    modprobe -d "$tmp/k" -S "$ver" --show-depends "$m"
  done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r m; do
    f=${m##*/}
    # busybox insmod takes plain .ko files; newer Debian kernels ship them xz- or zstd-compressed.
    case $f in
      *.xz) f=${f%.xz}; xz -dc "$m" > "$tmp/ir/mod/$f" ;;
      *.zst) f=${f%.zst}; zstd -qdc "$m" > "$tmp/ir/mod/$f" ;;
      *) cp "$m" "$tmp/ir/mod/" ;;
    esac
    echo "$f" >> "$tmp/ir/mod/order"
  done
  cat > "$tmp/ir/init" <<'EOF'
#!/bin/busybox sh
# Mounts the host's / (read-only, 9p) under a tmpfs overlay, the shared work
# directory on top, and hands over to the job's guest script.
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /lower /rw /newroot
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /mod/order); do insmod "/mod/$m"; done
o=trans=virtio,version=9p2000.L,msize=262144
job=$(sed -n 's/.*clbvm=\([^ ]*\).*/\1/p' /proc/cmdline)
mount -t 9p -o $o,ro,cache=loose root /lower
mount -t tmpfs -o mode=755 rw /rw; mkdir /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work root /newroot
cwd=$(cat "/newroot$job/cwd")
if [ "$cwd" != / ]; then mkdir -p "/newroot$cwd"; mount -t 9p -o $o,cache=loose work "/newroot$cwd"; fi
for d in dev proc sys; do mount --move /$d /newroot/$d; done
exec switch_root /newroot /bin/bash "$job/guest.sh"
EOF
  chmod +x "$tmp/ir/init"
  (cd "$tmp/ir" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$tmp/initrd"
  rm -rf "$tmp/ir"
  echo "$ver" > "$tmp/version"
  rm -rf "$cache"
  mv "$tmp" "$cache"
)
# cache-key: end

mkdir -p "$root"
(
  flock 9
  if [ ! -s "$cache/version" ]; then
    echo "run-in-vm: preparing the kernel cache in $cache (once)" >&2
    prepare
  fi
  touch "$cache/used"
  # Caches of other versions of the preparation are dead weight (~400 MB each);
  # one used in the last day may belong to another checkout running right now.
  for d in "$root"/*; do
    case ${d##*/} in [0-9]*) ;; *) continue ;; esac
    # Other kernels of this preparation are not dead weight.
    case ${d##*/} in "$key" | "$key"-*) continue ;; esac
    [ -d "$d" ] || continue
    u=$d; [ -e "$d/used" ] && u=$d/used
    [ -n "$(find "$u" -maxdepth 0 -newermt '-1 day')" ] || rm -rf "$d"
  done
) 9> "$root/lock"

job=$(mktemp -d /tmp/clbvm.XXXXXX)
chmod 755 "$job"
qemu_pid=
cleanup() {
  [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null
  rm -rf "$job"
}
trap cleanup EXIT
trap 'exit 129' HUP INT TERM

# Named virtio-serial ports (CLBVM_PORTS): qemu side here, /dev/virtio-ports/NAME links in the guest.
ports=()
port_links=
for p in ${CLBVM_PORTS:-}; do
  name=${p%%=*} sock=${p#*=}
  case $name in *[!A-Za-z0-9._-]* | '') echo "run-in-vm: bad port name in CLBVM_PORTS: $p" >&2; exit 125 ;; esac
  [ -S "$sock" ] || { echo "run-in-vm: CLBVM_PORTS: $sock is not a listening Unix socket" >&2; exit 125; }
  ports+=(-chardev "socket,id=port${#ports[@]},path=${sock//,/,,}" -device "virtserialport,chardev=port${#ports[@]},name=$name")
  port_links+=" $name"
done

pwd > "$job/cwd"
printf '%s\n' "$1" > "$job/script"
# The guest side: finish the mounts, load the modules, run the job with its
# stdout/stderr/status on three virtio consoles (raw: no \n -> \r\n), then
# sync (writes to the cache=loose share are lost otherwise) and reboot, which
# -no-reboot turns into qemu exiting.
cat > "$job/guest.sh" <<EOF
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mkdir -p /dev/pts /dev/shm /usr/lib/modules
mount -t devpts devpts /dev/pts; mount -t tmpfs shm /dev/shm; mount -t tmpfs run /run
mount --bind "$cache/k/lib/modules" /usr/lib/modules
hostname clbvm
ip link set lo up
# What udev would do for named virtio-serial ports.
for name in$port_links; do
  for f in /sys/class/virtio-ports/*/name; do
    [ "\$(cat "\$f")" = "\$name" ] || continue
    mkdir -p /dev/virtio-ports; d=\${f%/name}; ln -sf "/dev/\${d##*/}" "/dev/virtio-ports/\$name"
  done
done
modprobe -a ${CLBVM_MODULES:-ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh dummy}
cd "\$(cat "$job/cwd")"
# Raw mode only lasts while the console stays open: set it on the fds the job writes to.
exec 3> /dev/hvc0 4> /dev/hvc1
stty raw -echo <&3; stty raw -echo <&4
bash "$job/script" < /dev/null >&3 2>&4 3>&- 4>&-
echo \$? > /dev/hvc2
sync
echo b > /proc/sysrq-trigger
EOF

accel=${CLBVM_ACCEL:-auto}
if [ "$accel" = auto ]; then
  # /dev/kvm alone is not enough: a nested PVM hypervisor (kvm_pvm) provides it
  # but cannot run stock Debian kernels. Only real VMX/SVM KVM counts.
  accel=tcg
  if [ -w /dev/kvm ] && { [ -e /sys/module/kvm_intel ] || [ -e /sys/module/kvm_amd ]; }; then accel=kvm; fi
fi
if [ "$accel" = kvm ]; then accel_args=(-accel kvm -cpu host); else accel_args=(-accel tcg -cpu max); fi

share() { # id path extra-options
  echo -fsdev "local,id=$1,path=${2//,/,,},security_model=none,multidevs=remap$3"
  echo -device "virtio-9p-pci,fsdev=$1,mount_tag=$1"
}
shares=()
while read -r opt val; do shares+=("$opt" "$val"); done < <(
  share root / ,readonly=on
  [ "$(pwd)" = / ] || share work "$(pwd)" ""
)

timeout --kill-after=5 "${CLBVM_TIMEOUT:-300}" qemu-system-x86_64 "${accel_args[@]}" -M pc \
  -m "${CLBVM_MEM:-1536}" -smp "${CLBVM_CPUS:-2}" -vga none -display none -monitor none -no-reboot -nic none \
  -kernel "$cache/vmlinux" -initrd "$cache/initrd" -serial "file:$job/console.log" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off cryptomgr.notests clbvm=$job" \
  "${shares[@]}" \
  -device virtio-serial-pci \
  -chardev stdio,id=out,signal=off -device virtconsole,chardev=out \
  -chardev file,id=err,path="$job/stderr" -device virtconsole,chardev=err \
  -chardev file,id=rc,path="$job/rc" -device virtconsole,chardev=rc \
  "${ports[@]}" < /dev/null &
qemu_pid=$!
qemu_status=0
wait "$qemu_pid" || qemu_status=$?
qemu_pid=

[ -f "$job/stderr" ] && cat "$job/stderr" >&2
[ -n "${CLBVM_DEBUG:-}" ] && cat "$job/console.log" >&2
status=$(tr -dc 0-9 < "$job/rc" 2>/dev/null || true)
if [ -z "$status" ]; then
  why="qemu exited with status $qemu_status"
  [ "$qemu_status" = 124 ] && why="timed out after ${CLBVM_TIMEOUT:-300} s"
  echo "run-in-vm: the VM failed ($why) before the script reported its exit status; guest kernel console:" >&2
  tail -40 "$job/console.log" >&2 || true
  exit 125
fi
exit "$status"
