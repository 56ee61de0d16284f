#!/usr/bin/env bash
# Boot a stock Debian kernel in qemu with a Debian 12 root filesystem (pure cgroup v2, Landlock
# on) and run one command in it against this checkout; its output and exit status come back.
#
#   scripts/vm-test.sh [--kernel 6.1|6.12|VERSION] [--accel auto|kvm|tcg] [--timeout SECONDS]
#                      [--mem 4G] [--smp 2] [--share HOSTDIR:GUESTDIR]... -- COMMAND...
#   scripts/vm-test.sh --list-kernels        what apt offers
#   scripts/vm-test.sh --prepare [--kernel V] build the cache only (kernel, root filesystem, image)
#
# The host builds (scripts/build.sh); the guest compiles nothing. What runs in the guest is a
# staged copy at /srv/project: the checkout's tracked files plus build/agentjail,
# build/agentjail-serve, build/agentjail-probe, build/agentjail-egress, build/agentjail-interp.so and build/tests/{aj-*,test-unit-*}. COMMAND is joined with spaces and
# run by bash as root in the service /system.slice/ajvm-guest.service, in /srv/project.
# Whatever it writes to $AJVM_OUT comes back to the host: the last job's directory is printed,
# and with --out DIR its out/ is copied to DIR. Kernels come from `apt-get download`
# (linux-image-amd64 = 6.1, linux-image-6.12-amd64 = 6.12); the root from debootstrap with
# the packages in scripts/vm/packages.txt. Cache: /var/tmp/ajvm (AJVM_CACHE). docs/testing-vms.md.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/vm" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${AJVM_CACHE:-/var/tmp/ajvm}
KERNEL=6.1 ACCEL=auto PROJECT=$ROOT OUTCOPY=
TIMEOUT=3600 MEM=4G SMP=2 MODE=run EXTRA=()

die() { echo "vm-test: $*" >&2; exit 125; }
say() { echo "vm-test: $*" >&2; }
while [ $# -gt 0 ]; do
  case $1 in
    --kernel) KERNEL=$2; shift 2 ;;
    --accel) ACCEL=$2; shift 2 ;;
    --out) OUTCOPY=$2; shift 2 ;;
    --share) EXTRA+=("$2"); shift 2 ;;   # read-only 9p share, mounted in the guest
    --timeout) TIMEOUT=$2; shift 2 ;;
    --mem) MEM=$2; shift 2 ;;
    --smp) SMP=$2; shift 2 ;;
    --list-kernels) MODE=list; shift ;;
    --prepare) MODE=prepare; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot, image)"
[ "$MODE" != run ] || [ $# -gt 0 ] || die "no command (vm-test.sh [options] -- COMMAND)"
mkdir -p "$CACHE"/{debs,kernels,logs,runs}

# ---------------------------------------------------------------- apt mirror (read, never stored)
apt_uri() { # suite -> the URI apt is configured with for it
  local want=$1 f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v want="$want" '/^[[:space:]]*$/{uri=""} /^URIs:/{uri=$2}
      /^Suites:/{for(i=2;i<=NF;i++) if($i==want && uri!=""){print uri; exit}}' "$f"
  done
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk -v want="$want" '$1=="deb" {u=$2; s=$3; if ($2 ~ /^\[/) {u=$3; s=$4}; if (s==want) print u}' || true
}
MIRROR=$(apt_uri bookworm | head -1 || true); SECMIRROR=$(apt_uri bookworm-security | head -1 || true)
MIRROR_HOST=$(echo "${MIRROR:-none}" | sed 's#^[a-z]*://##; s#/.*##')
scrub() { sed "s#$MIRROR_HOST#<mirror>#g"; }  # keep the mirror's name out of our logs

need_host_tools() {
  local miss=()
  command -v qemu-system-x86_64 >/dev/null || miss+=(qemu-system-x86)
  command -v qemu-img >/dev/null || miss+=(qemu-utils)
  command -v debootstrap >/dev/null || miss+=(debootstrap)
  command -v mkfs.ext4 >/dev/null || miss+=(e2fsprogs)
  command -v rsync >/dev/null || miss+=(rsync)
  if [ ${#miss[@]} -gt 0 ]; then
    say "installing host tools: ${miss[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${miss[@]}" >/dev/null
  fi
}

# ---------------------------------------------------------------- kernels
list_kernels() {
  echo "== apt-cache policy linux-image-amd64"; apt-cache policy linux-image-amd64 | sed 1d | scrub
  echo "== configured suites: $(apt-cache policy | grep -o 'n=[a-z0-9-]*' | cut -c3- | sort -u | tr '\n' ' ')(no backports unless listed)"
  echo "== kernel meta packages (linux-image-X-amd64) and what they pull in"
  apt-cache pkgnames linux-image- | grep -E '^linux-image-([0-9.]+-)?amd64$' | sort -V | while read -r m; do
    printf '  %-26s -> %s\n' "$m" "$(apt-cache depends "$m" 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')"
  done
}
kernel_pkg() { # 6.1 | 6.12 | 6.1.0-56-amd64 | linux-image-... -> real image package
  local v=$1 meta=""
  case $v in
    6.1|default|stock) meta=linux-image-amd64 ;;
    linux-image-*) echo "$v"; return ;;
    *) if apt-cache show "linux-image-$v-amd64" >/dev/null 2>&1; then meta=linux-image-$v-amd64
       elif apt-cache show "linux-image-$v" >/dev/null 2>&1; then echo "linux-image-$v"; return
       else die "no kernel package for '$v' (see --list-kernels)"; fi ;;
  esac
  apt-cache depends "$meta" | awk '/Depends: linux-image-[0-9]/{print $2; exit}'
}
ensure_kernel() { # pkg -> sets KVER, KDIR
  local pkg=$1 deb
  KVER=${pkg#linux-image-}; KDIR=$CACHE/kernels/$KVER
  [ -f "$KDIR/vmlinuz" ] && [ -d "$KDIR/tree/lib/modules/$KVER" ] && return 0
  say "fetching $pkg"
  ( cd "$CACHE/debs" && apt-get -q -o APT::Sandbox::User=root download "$pkg" 2>&1 | scrub >"$CACHE/logs/download-$KVER.log" )
  deb=$(ls -t "$CACHE/debs/${pkg}_"*.deb | head -1) || die "download of $pkg failed"
  rm -rf "$KDIR"; mkdir -p "$KDIR"
  dpkg-deb -x "$deb" "$KDIR/tree"
  cp "$KDIR/tree/boot/vmlinuz-$KVER" "$KDIR/vmlinuz"
  basename "$deb" >"$KDIR/package"
}

# ---------------------------------------------------------------- root filesystem
# One root per package list: a changed list builds a new one, an old one stays usable.
PKGHASH=$(sha256sum "$HERE/packages.txt" | cut -c1-12)
ROOTFS=$CACHE/rootfs-$PKGHASH IMG=$CACHE/rootfs-$PKGHASH.img
in_root() { # run a command chrooted in $ROOTFS with /proc /sys /dev (private mounts)
  unshare --mount --fork env ROOTFS="$ROOTFS" bash -c '
    set -e; r=$ROOTFS
    mount -t proc proc "$r/proc"; mount -t sysfs sysfs "$r/sys"
    mount --rbind /dev "$r/dev"; mount --make-rslave "$r/dev"; mount -t tmpfs tmpfs "$r/tmp"
    exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      DEBIAN_FRONTEND=noninteractive "$@"' in_root "$@"
}
wanted_pkgs() { grep -v '^#' "$HERE/packages.txt" | awk 'NF {print $1}' | sort -u; }
apt_in_root() { # install packages into the root from the host's mirror; nothing of it stays behind
  [ -n "$MIRROR" ] || die "no bookworm mirror in /etc/apt/sources.list*"
  cat >"$ROOTFS/etc/apt/sources.list.d/ajvm-build.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  [ -n "$SECMIRROR" ] && printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$SECMIRROR" >>"$ROOTFS/etc/apt/sources.list.d/ajvm-build.sources"
  : >"$ROOTFS/etc/apt/sources.list"
  printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"; chmod 755 "$ROOTFS/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
  local rc=0
  { in_root apt-get update -q && in_root apt-get install -y -q --no-install-recommends "$@"; } \
    2>&1 | scrub >>"$CACHE/logs/rootfs-apt.log" || rc=1
  in_root apt-get clean >/dev/null 2>&1 || true
  rm -f "$ROOTFS/etc/apt/sources.list.d/ajvm-build.sources" "$ROOTFS/usr/sbin/policy-rc.d"
  rm -rf "$ROOTFS"/var/lib/apt/lists/*; : >"$ROOTFS/etc/resolv.conf"
  echo "# apt sources removed by vm-test.sh after the build: the VM has no network" >"$ROOTFS/etc/apt/sources.list"
  [ $rc = 0 ] || die "apt-get in the root failed: see $CACHE/logs/rootfs-apt.log"
  touch "$ROOTFS.changed"
}
ensure_rootfs() {
  if [ ! -f "$ROOTFS/.ajvm-ok" ]; then
    [ -n "$MIRROR" ] || die "no bookworm mirror in /etc/apt/sources.list*"
    say "debootstrap bookworm (minbase) into $ROOTFS.tmp (takes minutes; log $CACHE/logs/debootstrap.log)"
    rm -rf "$ROOTFS.tmp" "$ROOTFS"
    debootstrap --variant=minbase --include=systemd-sysv,udev,kmod bookworm "$ROOTFS.tmp" "$MIRROR" 2>&1 |
      scrub >"$CACHE/logs/debootstrap.log" || die "debootstrap failed: $CACHE/logs/debootstrap.log"
    mv "$ROOTFS.tmp" "$ROOTFS"
    configure_rootfs
    touch "$ROOTFS/.ajvm-ok" "$ROOTFS.changed"
  fi
  local missing=() p
  while read -r p; do
    in_root dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done < <(wanted_pkgs)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing into the root: ${missing[*]} (log $CACHE/logs/rootfs-apt.log)"
    apt_in_root "${missing[@]}"
  fi
  install_guest_files
}
configure_rootfs() {
  local r=$ROOTFS
  echo ajvm >"$r/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 ajvm\n::1 localhost ip6-localhost ip6-loopback\n' >"$r/etc/hosts"
  echo "/dev/vda / ext4 rw,errors=remount-ro 0 0" >"$r/etc/fstab"
  in_root passwd -d root >/dev/null
  printf '9p\n9pnet_virtio\n' >"$r/etc/modules-load.d/ajvm.conf"
  for u in serial-getty@ttyS0 serial-getty@ttyS1 getty@tty1 apt-daily.timer apt-daily-upgrade.timer \
           e2scrub_all.timer e2scrub_reap fstrim.timer systemd-timesyncd; do
    case $u in *.*) n=$u ;; *) n=$u.service ;; esac
    ln -sf /dev/null "$r/etc/systemd/system/$n"
  done
}
install_guest_files() {
  local r=$ROOTFS new
  new=$(mktemp)
  cat "$HERE/ajvm-guest" >"$new"
  if ! cmp -s "$new" "$r/usr/local/sbin/ajvm-guest"; then
    install -m 755 "$new" "$r/usr/local/sbin/ajvm-guest"; touch "$ROOTFS.changed"
  fi
  rm -f "$new"
  cat >"$new.unit" <<'EOF'
[Unit]
Description=ajvm: run the job handed in by the host, then power off
Wants=systemd-modules-load.service
After=systemd-modules-load.service local-fs.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/ajvm-guest
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
  if ! cmp -s "$new.unit" "$r/etc/systemd/system/ajvm-guest.service"; then
    install -m 644 "$new.unit" "$r/etc/systemd/system/ajvm-guest.service"; touch "$ROOTFS.changed"
  fi
  rm -f "$new.unit"
  mkdir -p "$r/etc/systemd/system/multi-user.target.wants"
  ln -sf /etc/systemd/system/ajvm-guest.service "$r/etc/systemd/system/multi-user.target.wants/ajvm-guest.service"
}
kernel_into_root() { # modules + initramfs for $KVER
  local r=$ROOTFS
  if [ ! -f "$KDIR/initrd-$PKGHASH.img" ] || [ ! -f "$r/lib/modules/$KVER/modules.dep" ]; then
    say "modules and initramfs for $KVER"
    rm -rf "$r/lib/modules/$KVER"; mkdir -p "$r/lib/modules"
    cp -a "$KDIR/tree/lib/modules/$KVER" "$r/lib/modules/"
    cp "$KDIR/tree/boot/config-$KVER" "$KDIR/tree/boot/System.map-$KVER" "$r/boot/"
    in_root depmod -a "$KVER"
    in_root mkinitramfs -o "/boot/initrd.img-$KVER" "$KVER" 2>&1 | grep -v '^W: Possible missing firmware' || true
    cp "$r/boot/initrd.img-$KVER" "$KDIR/initrd-$PKGHASH.img"
    touch "$ROOTFS.changed"
  fi
}
ensure_image() {
  if [ ! -f "$IMG" ] || [ "$ROOTFS.changed" -nt "$IMG" ]; then
    local mb
    mb=$(( $(du -sm "$ROOTFS" | cut -f1) + 6144 ))
    say "making the ext4 image ($mb MiB, sparse) from $ROOTFS"
    rm -f "$IMG.tmp"
    mkfs.ext4 -q -F -L ajroot -E lazy_itable_init=1 -d "$ROOTFS" "$IMG.tmp" "${mb}M"
    mv "$IMG.tmp" "$IMG"
  fi
}

# ---------------------------------------------------------------- main
need_host_tools
if [ "$MODE" = list ]; then list_kernels; exit 0; fi
exec 9>"$CACHE/.lock"; flock 9          # one builder at a time; runs share the image read-only
PKG=$(kernel_pkg "$KERNEL"); [ -n "$PKG" ] || die "cannot resolve kernel '$KERNEL'"
ensure_kernel "$PKG"
ensure_rootfs
kernel_into_root
ensure_image
flock -u 9
[ "$MODE" = prepare ] && { say "ready: kernel $KVER, image $IMG"; exit 0; }

# accelerator: this host's /dev/kvm may be PVM (kvm_pvm: pagetable-based virtualization, no VT-x/SVM),
# which boots only PVM-enlightened guest kernels; a stock Debian kernel hangs there (see README).
if [ "$ACCEL" = auto ]; then
  if [ -d /sys/module/kvm_pvm ]; then ACCEL=tcg; say "/dev/kvm is kvm_pvm here (runs only PVM guest kernels): using TCG"
  elif [ -r /dev/kvm ] && [ -w /dev/kvm ] && [ -d /sys/module/kvm ]; then ACCEL=kvm
  else ACCEL=tcg; say "no usable /dev/kvm: using TCG"; fi
fi
case $ACCEL in
  kvm) ACC=(-enable-kvm -cpu host) ;;
  tcg) ACC=(-accel tcg,thread=multi -cpu max) ;;
  *) die "--accel auto|kvm|tcg" ;;
esac

[ -x "$PROJECT/build/agentjail" ] || die "build/agentjail missing: run scripts/build.sh first"
JOB=$(mktemp -d "$CACHE/runs/$(date +%Y%m%d-%H%M%S)-$KVER.XXXX")
# The staged project: tracked files (as a fresh checkout has them) and the host's binaries.
STAGE=$JOB/project
mkdir -p "$STAGE/build/tests"
if git -C "$PROJECT" rev-parse --git-dir >/dev/null 2>&1; then
  ( cd "$PROJECT" && git ls-files -z --cached --others --exclude-standard |
      rsync -a --from0 --ignore-missing-args --files-from=- ./ "$STAGE/" )
else
  rsync -a --exclude='/build*' --exclude=.git "$PROJECT/" "$STAGE/"
fi
for f in "$PROJECT"/build/agentjail "$PROJECT"/build/agentjail-serve "$PROJECT"/build/agentjail-probe \
         "$PROJECT"/build/agentjail-egress "$PROJECT"/build/agentjail-interp.so "$PROJECT"/build/tests/aj-* \
         "$PROJECT"/build/tests/test-unit-*; do
  [ -f "$f" ] && [ -x "$f" ] && cp -p "$f" "$STAGE/build/${f#"$PROJECT"/build/}"
done
chmod -R a+rX "$STAGE"
mkdir -m 1777 "$JOB/out"
printf '%s\n' "$*" >"$JOB/cmd"
printf 'ajproject /mnt/project\n' >"$JOB/shares"
SHARES=()
for i in "${!EXTRA[@]}"; do
  h=${EXTRA[$i]%%:*} g=${EXTRA[$i]#*:}
  [ -d "$h" ] || die "--share $h: not a directory"
  echo "ajextra$i $g" >>"$JOB/shares"
  SHARES+=(-virtfs "local,path=$(realpath "$h"),mount_tag=ajextra$i,security_model=none,readonly=on,id=ajextra$i")
done
echo "$KVER $ACCEL" >"$JOB/kernel"
APPEND="root=/dev/vda rw console=ttyS0,115200 quiet loglevel=4 panic=1 systemd.show_status=0 net.ifnames=0"
APPEND+=" systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all lsm=landlock,lockdown,yama,integrity,apparmor"
echo "$APPEND" >"$JOB/append"
say "kernel $KVER, accel $ACCEL, job $JOB"
t0=$(date +%s.%N)
boot() {
  : >"$JOB/live.log"
  tail -n +1 -F "$JOB/live.log" 2>/dev/null & TAILPID=$!
  set +e
  timeout "$TIMEOUT" qemu-system-x86_64 "${ACC[@]}" -m "$MEM" -smp "$SMP" -nographic -no-reboot \
    -monitor none -serial "file:$JOB/console.log" -serial "file:$JOB/live.log" \
    -kernel "$KDIR/vmlinuz" -initrd "$KDIR/initrd-$PKGHASH.img" -append "$APPEND" \
    -drive "file=$IMG,format=raw,if=virtio,snapshot=on" -nic none \
    -virtfs "local,path=$JOB,mount_tag=ajjob,security_model=none,id=ajjob" \
    -virtfs "local,path=$STAGE,mount_tag=ajproject,security_model=none,readonly=on,id=ajproject" \
    "${SHARES[@]}" \
    >"$JOB/qemu.log" 2>&1 </dev/null
  qrc=$?
  set -e
  sleep 0.3; kill "$TAILPID" 2>/dev/null; wait "$TAILPID" 2>/dev/null || true
}
boot
# Multi-threaded TCG does not always make one vCPU see another's patch of
# kernel text at once: a vCPU can still run an int3 the kernel has already
# replaced (a static key flipped while the other CPU runs that code; a cpu
# limit flips the scheduler's bandwidth key), and the guest dies with
# "Oops: int3" at a patch site. That is the emulator's, not the guest's
# or ours: the job boots again, once, saying so; any other crash, or the
# same one twice, fails.
if [ ! -f "$JOB/rc" ] && [ "$ACCEL" = tcg ] && grep -q "Oops: int3" "$JOB/console.log" 2>/dev/null; then
  mv "$JOB/console.log" "$JOB/console-crashed.log"
  say "the guest kernel died at an int3 of a text-patching site ($(grep -m1 -o 'RIP: [^ ]*' "$JOB/console-crashed.log")):"
  say "  multi-threaded TCG ran a patched-out int3; console kept in $JOB/console-crashed.log; booting again (once)"
  find "$JOB/out" -mindepth 1 -delete 2>/dev/null || true
  rm -f "$JOB/boot_s" "$JOB/cmd_s"
  boot
fi
t1=$(date +%s.%N)
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
echo "$wall" >"$JOB/wall_s"
rm -rf "$STAGE"
[ -n "$OUTCOPY" ] && mkdir -p "$OUTCOPY" && cp -a "$JOB/out/." "$OUTCOPY/" 2>/dev/null
# Keep the last 20 jobs.
ls -1dt "$CACHE"/runs/*/ 2>/dev/null | tail -n +21 | xargs -r rm -rf
if [ -f "$JOB/rc" ]; then
  rc=$(cat "$JOB/rc")
  say "exit $rc; wall ${wall}s (guest: runner started at $(cat "$JOB/boot_s" 2>/dev/null)s uptime, command $(cat "$JOB/cmd_s" 2>/dev/null)s); job $JOB"
  exit "$rc"
fi
say "no exit status from the guest (qemu rc $qrc$([ $qrc = 124 ] && echo ": timeout after ${TIMEOUT}s")); last console lines:"
tail -n 30 "$JOB/console.log" >&2; tail -n 5 "$JOB/qemu.log" >&2
exit 125
