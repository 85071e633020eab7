#!/bin/bash
# run-lane.sh - the Soft-RoCE VM lane: real libibverbs RC traffic from the engine's own tests.
#
# CI's kernel has no RDMA. Debian's stock kernel ships rdma_rxe + ib_uverbs as modules, so this
# script unpacks that kernel (never installs it), boots it under qemu with the HOST's root
# filesystem shared read-only over virtio-9p (a tmpfs overlay on top inside the guest), and
# inside the VM: creates rxe0 on a virtio-net NIC, runs engine/tests/verbs_probe.rs and
# engine/tests/verbs_rxe.rs (built here on the host, run there at the same path), then measures
# our RC WRITE goodput and ib_write_bw's at 64 KiB and 1 MiB in the same VM, and prints the
# ratio. The VM has no network beyond its own NIC (no slirp, no tap).
#
# Needs root (apt-get, 9p export of /). Exit 0 only if every guest check passed.
# Knobs:
#   LANE_WORK      cache/work dir               (default benches/rxe/work, git-ignored)
#   LANE_ACCEL     tcg | kvm                    (default tcg; the sandbox's /dev/kvm cannot
#                                               run a stock kernel, a real host's can)
#   LANE_SMP       vCPUs (default 2)    LANE_MEM  MiB (default 1024)
#   LANE_ITERS_64K / LANE_ITERS_1M   WRITEs per size, ours and ib_write_bw's (1000 / 128)
#   LANE_PROFILE   cargo profile of the test binaries (default release)
#   LANE_ONE_VM=0  skip phase 1 (one VM; no goodput ratio then)
#   LANE_TWO_VM=0  skip phase 2 (two VMs)
#   LANE_ONLY=stripe  phase 2 runs only the striping test (a quick loop while working on it)
#   LANE_ONLY=threads phase 1 runs only the verbs thread-count test (pair with LANE_TWO_VM=0
#                     LANE_DMABUF=0)
#   LANE_SKIP_BUILD=1  reuse the binaries already in $WORK/bin (no cargo)
#   LANE_DMABUF=0  skip phase 3 (udmabuf; boots a second kernel when the first lacks it)
#   LANE_DMABUF_KPKG  that kernel's package (default: what linux-image-6.12-amd64 points at)
#   LANE_SKIP_APT=1  do not apt-get (packages already there)
#   LANE_PERF=1    also profile the 64 KiB GET loop with perf (out-single/perf.data)
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
LANE=$REPO/benches/rxe
WORK=${LANE_WORK:-$LANE/work}
ACCEL=${LANE_ACCEL:-tcg}
SMP=${LANE_SMP:-2}
MEM=${LANE_MEM:-1024}
N64=${LANE_ITERS_64K:-1000}
N1M=${LANE_ITERS_1M:-128}
PROFILE=${LANE_PROFILE:-release}
START=$(date +%s.%N)
t() { awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "--- lane [$(t)s] $*"; }
fatal() { log "ERROR: $*"; exit 2; }
[ "$(id -u)" = 0 ] || fatal "run as root (apt-get, qemu -virtfs of /)"
mkdir -p "$WORK" || fatal "cannot create $WORK"
# need_disk MIB WHAT: stops with a clear message when the work dir's disk is short, rather than
# half-unpacking a kernel (a full disk once showed up as a wall of tar errors).
need_disk() {
  local free_mib
  free_mib=$(df -Pm "$WORK" | awk 'NR==2{print $4}')
  [ "${free_mib:-0}" -ge "$1" ] \
    || fatal "$2 needs ${1} MiB free on $(df -P "$WORK" | awk 'NR==2{print $6}'), only ${free_mib} MiB left (df -h; cargo clean frees target/)"
}

# 1. Host packages: qemu, busybox for the initramfs, rdma-core userspace that the guest runs
#    from the shared root (libibverbs + the rxe provider, perftest), tools the guest uses.
PKGS="qemu-system-x86 busybox-static rdma-core ibverbs-providers ibverbs-utils perftest
      iproute2 iputils-ping kmod cpio gzip python3"
if [ "${LANE_SKIP_APT:-0}" != 1 ]; then
  missing=$(for p in $PKGS; do dpkg-query -W -f '${Status}\n' $p 2>/dev/null | grep -q '^install ok installed' || echo $p; done)
  if [ -n "$missing" ]; then
    log "installing: $(echo $missing)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } > "$WORK/apt.log" 2>&1 \
      || fatal "apt-get failed (see $WORK/apt.log)"
  fi
fi

# 2. The guest kernel: whatever linux-image-amd64 points at, unpacked into $WORK/kernel.
#    unpack_kernel PKG DIR: unpacks PKG into DIR once; sets KVER and KERNEL for it.
unpack_kernel() {
  local pkg=$1 dir=$2
  if [ ! -e "$dir/.unpacked-$pkg" ]; then
    need_disk 2048 "unpacking $pkg"
    log "fetching $pkg (unpacked only, not installed)"
    rm -rf "$dir" "$WORK/deb" && mkdir -p "$dir" "$WORK/deb"
    (cd "$WORK/deb" && apt-get download "$pkg" > dl.log 2>&1) || fatal "apt-get download $pkg"
    dpkg-deb -x "$WORK"/deb/*.deb "$dir" || fatal "dpkg-deb -x"
    rm -rf "$WORK/deb"; touch "$dir/.unpacked-$pkg"
  fi
  KVER=$(ls "$dir/lib/modules" | head -n1)
  local vmlinuz="$dir/boot/vmlinuz-$KVER"
  [ -f "$vmlinuz" ] || fatal "no vmlinuz in $pkg"
  # qemu can boot the raw ELF through the PVH note (CONFIG_PVH=y in Debian), which avoids
  # decompressing bzImage inside an emulated CPU (seconds under TCG).
  KERNEL=$vmlinuz
  if [ ! -s "$dir/vmlinux" ]; then
    python3 - "$vmlinuz" "$dir/vmlinux" <<'PY' || rm -f "$dir/vmlinux"
import lzma, sys
blob = open(sys.argv[1], "rb").read()
at = blob.find(b"\xfd7zXZ\x00")
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(blob[at:]) if at >= 0 else b""
if not elf.startswith(b"\x7fELF"):
    sys.exit("bzImage payload is not an XZ-compressed ELF")
open(sys.argv[2], "wb").write(elf)
PY
  fi
  [ -s "$dir/vmlinux" ] && KERNEL="$dir/vmlinux"
  depmod -b "$dir" "$KVER" || fatal "depmod"
}
resolve_kpkg() { apt-cache depends "$1" 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
KPKG=${LANE_KPKG:-$(resolve_kpkg linux-image-amd64)}
[ -n "$KPKG" ] || fatal "cannot resolve linux-image-amd64"
unpack_kernel "$KPKG" "$WORK/kernel"
log "guest kernel $KVER"

# 3. Test binaries, built here; the guest runs them at the same path.
BIN="$WORK/bin"
if [ "${LANE_SKIP_BUILD:-0}" = 1 ]; then
  [ -x "$BIN/verbs_striping" ] && [ -x "$BIN/capi_batch" ] || fatal "LANE_SKIP_BUILD=1 but $BIN is incomplete"
  log "reusing the binaries in $BIN"
else
need_disk 4096 "building the lane's test binaries"
log "building engine verbs tests ($PROFILE)"
BUILD_LOG="$WORK/cargo.log"
{ (cd "$REPO" && cargo test -p engine --profile "$PROFILE" --test verbs_rxe --test verbs_probe --test soft_dmabuf --test gpu_direct --test workers_threads --no-run \
      --message-format=json) && (cd "$REPO" && cargo test -p hipobj-gateway --profile "$PROFILE" \
      --test rdma_matrix --test rdma_hostile --test rdma_v2 --test verbs_striping --no-run --message-format=json) && (cd "$REPO" && cargo build -p engine \
      --profile "$PROFILE" --example verbs_rc_peer --message-format=json) && (cd "$REPO" && \
      cargo build -p hipobj-cli --profile "$PROFILE" --bin hipobj --message-format=json) && (cd "$REPO" && \
      cargo build -p hipobj-capi --profile "$PROFILE" --lib --message-format=json); } \
  2> "$BUILD_LOG" > "$WORK/cargo.json" || { tail -20 "$BUILD_LOG"; fatal "cargo build failed"; }
rm -rf "$BIN"; mkdir -p "$BIN"
for name in verbs_rxe verbs_probe soft_dmabuf gpu_direct workers_threads verbs_rc_peer rdma_matrix rdma_hostile rdma_v2 verbs_striping hipobj; do
  exe=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[2] and m.get("executable"):
        print(m["executable"])' "$WORK/cargo.json" "$name" | tail -n1)
  [ -x "$exe" ] || fatal "no test executable for $name"
  cp "$exe" "$BIN/$name"
done
# The C API's Quick Start and 1,000-op batch (capi/tests/c/), linked against libhipobj.so next
# to them; the client VM runs them against `hipobj serve --fabric verbs` expecting rdma-verbs.
SO=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "hipobj":
        print("\n".join(f for f in m["filenames"] if f.endswith("libhipobj.so")))' "$WORK/cargo.json" | tail -n1)
[ -f "$SO" ] || fatal "no libhipobj.so in the cargo output"
cp "$SO" "$BIN/"
for prog in quickstart batch; do
  cc -std=c11 -O1 -D_GNU_SOURCE -I "$REPO/capi/include" "$REPO/capi/tests/c/$prog.c" -o "$BIN/capi_$prog" \
    -L "$BIN" -Wl,-rpath,"$BIN" -lhipobj -lpthread -ldl -lm || fatal "cc capi/tests/c/$prog.c"
done
fi

# 4. initramfs: busybox + what it takes to mount the shared root (virtio-pci, 9p, overlay).
#    make_initramfs KDIR KVER OUT: for the kernel unpacked in KDIR (modules decompressed:
#    busybox insmod takes plain .ko files; newer Debian kernels ship .ko.xz).
make_initramfs() {
local kdir=$1 kver=$2 out=$3
INIT="$WORK/initramfs"; rm -rf "$INIT"; mkdir -p "$INIT"/{bin,dev,proc,sys,ko}
cp /bin/busybox "$INIT/bin/busybox"
for mod in virtio_pci 9pnet_virtio 9p overlay; do
  modprobe -d "$kdir" -S "$kver" --show-depends $mod || fatal "module $mod missing in $kdir"
done | awk '$1=="insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
  name=$(basename "$ko"); name=${name%.xz}; name=${name%.zst}; name=${name%.ko}
  case $ko in
    *.ko.xz) xz -dc "$ko" > "$INIT/ko/$name.ko";;
    *.ko.zst) zstd -qdc "$ko" > "$INIT/ko/$name.ko";;
    *) cp "$ko" "$INIT/ko/$name.ko";;
  esac || fatal "cannot copy $ko"
  echo "$name" >> "$INIT/ko/order"
done
cat > "$INIT/init" <<'SH'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc none /proc; mount -t sysfs none /sys; mount -t devtmpfs none /dev
for m in $(cat /ko/order); do insmod /ko/$m.ko || echo "insmod $m failed"; done
KDIR=; SCRIPT=
for w in $(cat /proc/cmdline); do
  case $w in lane.kdir=*) KDIR=${w#lane.kdir=};; lane.script=*) SCRIPT=${w#lane.script=};; esac
done
stop() { echo "init: $*"; poweroff -f; }
mkdir -p /ro /rw /root
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /ro || stop "9p root failed"
mount -t tmpfs -o size=50% none /rw && mkdir -p /rw/up /rw/wk
mount -t overlay -o lowerdir=/ro,upperdir=/rw/up,workdir=/rw/wk none /root || stop "overlay failed"
mount --move /proc /root/proc; mount --move /sys /root/sys; mount --move /dev /root/dev
mkdir -p /root/dev/pts /root/dev/shm && mount -t devpts none /root/dev/pts && mount -t tmpfs none /root/dev/shm
mount -t tmpfs none /root/run
KV=$(uname -r); mkdir -p /root/lib/modules/$KV
mount --bind /root$KDIR/lib/modules/$KV /root/lib/modules/$KV || stop "modules bind failed"
mkdir -p /root/laneout && mount -t 9p -o trans=virtio,version=9p2000.L,rw,msize=262144 laneout /root/laneout
cp /bin/busybox /root/run/busybox
printf '#!/bin/sh\nexport PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root\n/bin/bash %s\nsync\n/run/busybox poweroff -f\n' "$SCRIPT" > /root/run/go
chmod +x /root/run/go
exec switch_root /root /run/go
SH
chmod +x "$INIT/init"
(cd "$INIT" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$out" || fatal "cpio"
}
make_initramfs "$WORK/kernel" "$KVER" "$WORK/initramfs.gz"
INITRD="$WORK/initramfs.gz"; KDIR="$WORK/kernel"

# 5. Boot: phase 1 = one VM (all tests + goodput), phase 2 = two VMs joined by a qemu UDP
#    socket netdev on 127.0.0.1 (verbs_rc_peer server in A, client in B).
case $ACCEL in
  tcg) QACCEL="-accel tcg,thread=multi -cpu max";;
  kvm) QACCEL="-accel kvm -cpu host";;
  *) fatal "LANE_ACCEL=$ACCEL (tcg or kvm)";;
esac
# vm NAME ROLE SMP MAC NETDEV [MAC2]: boots one VM, its serial console to $WORK/vm-NAME.log.
# With MAC2 the VM gets a second virtio NIC: both NICs and NETDEV join one qemu hub (one L2
# segment), so each NIC reaches the peer VM on its own.
vm() {
  local name=$1 role=$2 smp=$3 mac=$4 net=$5 mac2=${6:-} out="$WORK/out-$1"
  local nics=(-netdev "$net",id=n0 -device virtio-net-pci,netdev=n0,mac=$mac,romfile=)
  [ -n "$mac2" ] && nics=(-netdev "$net",id=up0 -netdev hubport,id=h0,hubid=1,netdev=up0
    -netdev hubport,id=n0,hubid=1 -device virtio-net-pci,netdev=n0,mac=$mac,romfile=
    -netdev hubport,id=n1,hubid=1 -device virtio-net-pci,netdev=n1,mac=$mac2,romfile=)
  rm -rf "$out"; mkdir -p "$out"
  timeout 900 qemu-system-x86_64 $QACCEL -smp "$smp" -m "$MEM" -nodefaults -display none -no-reboot \
    -kernel "$KERNEL" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3 lane.kdir=$KDIR lane.script=$LANE/guest.sh lane.role=$role lane.bin=$BIN lane.iters64k=$N64 lane.iters1m=$N1M lane.perf=${LANE_PERF:-0} lane.getworkers=${LANE_GET_WORKERS:-1} lane.only=${LANE_ONLY:-all}" \
    -serial stdio \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs local,path="$out",mount_tag=laneout,security_model=none \
    "${nics[@]}" \
    < /dev/null > "$WORK/vm-$name.log" 2>&1
}
guest_ok() { [ "$(cat "$WORK/out-$1/status" 2>/dev/null)" = 0 ] && grep -q LANE_GUEST_OK "$WORK/vm-$1.log"; }
show() { grep -E '^\[vm |LANE_|test result|^test |diagnosis|VERBS_|IB_WRITE_BW|verified|panicked|device rxe0|^(server|client):|verbs_rc_peer|^rdma: |^listening|hipobj serve|^(quickstart|batch) ok|^paths:|^dialects:|capi-auto: (paths|dialects|quickstart)|rdma: pairing|went over|expected|VERBS_STRIPE|rxe1' "$WORK/vm-$1.log" | sed "s/^/  $1 | /"; }

PASS=0
OUT="$WORK/out-single"
if [ "${LANE_ONE_VM:-1}" = 1 ]; then
  log "phase 1: one VM ($ACCEL, $SMP vCPU, $MEM MiB)"
  P1=$(date +%s.%N)
  vm single single "$SMP" 52:54:00:00:02:01 hubport,hubid=0
  show single
  log "phase 1 VM ran $(awk -v a="$P1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s; log $WORK/vm-single.log"
  guest_ok single || PASS=1
fi

if [ "${LANE_TWO_VM:-1}" = 1 ]; then
  PA=$(( 30000 + RANDOM % 20000 )); PB=$(( PA + 1 ))
  log "phase 2: two VMs (1 vCPU each; B has two NICs), joined over UDP 127.0.0.1:$PA <-> :$PB"
  P2=$(date +%s.%N)
  vm A server 1 52:54:00:00:02:0a "socket,udp=127.0.0.1:$PB,localaddr=127.0.0.1:$PA" & VA=$!
  vm B client 1 52:54:00:00:02:0b "socket,udp=127.0.0.1:$PA,localaddr=127.0.0.1:$PB" 52:54:00:00:02:0c & VB=$!
  wait $VA; wait $VB
  show A; show B
  log "phase 2 VMs ran $(awk -v a="$P2" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s; logs $WORK/vm-A.log $WORK/vm-B.log"
  { guest_ok A && guest_ok B; } || PASS=1
  # Striping over B's two devices: per-device bytes of each op, and what was not striped.
  if [ -s "$WORK/out-B/stripe.txt" ]; then
    sed 's/^/LANE_STRIPE /' "$WORK/out-B/stripe.txt"
  else
    echo "LANE_STRIPE missing (no VERBS_STRIPE lines from VM B)"; PASS=1
  fi
fi

# Phase 3: the engine's dmabuf path over the soft device with a real udmabuf
# (engine/tests/soft_dmabuf.rs, gpu_direct.rs `*_udmabuf`). It needs CONFIG_UDMABUF, which
# Debian's 6.1 kernel lacks ("# CONFIG_UDMABUF is not set"); bookworm's 6.12 backport has it
# (=y), so this phase boots that kernel unless the lane's own has it.
if [ "${LANE_DMABUF:-1}" = 1 ]; then
  if grep -qE '^CONFIG_UDMABUF=(y|m)' "$KDIR/boot/config-$KVER"; then
    DKPKG=$KPKG; DKDIR=$KDIR
  else
    DKPKG=${LANE_DMABUF_KPKG:-$(resolve_kpkg linux-image-6.12-amd64)}; DKDIR="$WORK/kernel-dmabuf"
  fi
  if [ -z "$DKPKG" ]; then
    echo "LANE_DMABUF skipped: $KPKG has '$(grep UDMABUF "$KDIR/boot/config-$KVER" | head -n1)' and apt has no linux-image-6.12-amd64"
    PASS=1
  else
    if [ "$DKDIR" != "$KDIR" ]; then
      unpack_kernel "$DKPKG" "$DKDIR"
      make_initramfs "$DKDIR" "$KVER" "$WORK/initramfs-dmabuf.gz"
      INITRD="$WORK/initramfs-dmabuf.gz"; KDIR=$DKDIR
    fi
    log "phase 3: one VM on $KVER ($(grep -E '^CONFIG_UDMABUF' "$KDIR/boot/config-$KVER")): dmabuf over the soft device"
    P3=$(date +%s.%N)
    vm dmabuf dmabuf "$SMP" 52:54:00:00:02:21 hubport,hubid=0
    show dmabuf
    log "phase 3 VM ran $(awk -v a="$P3" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s; log $WORK/vm-dmabuf.log"
    guest_ok dmabuf || PASS=1
  fi
fi

# 6. Verdict and ratio (phase 1's numbers).
for size in $([ "${LANE_ONE_VM:-1}" = 1 ] && echo 65536 1048576); do
  # best of the repetitions on each side
  ours=$(sed -n "s/^VERBS_WRITE_BW size=$size .*MiBps=\([0-9.]*\).*/\1/p" "$OUT/ours.txt" 2>/dev/null | sort -g | tail -n1)
  ref=$(sed -n "s/^IB_WRITE_BW size=$size .*MiBps=\([0-9.]*\).*/\1/p" "$OUT/ref.txt" 2>/dev/null | sort -g | tail -n1)
  if [ -n "$ours" ] && [ -n "$ref" ]; then
    echo "LANE_RATIO size=$size ours_MiBps=$ours ib_write_bw_MiBps=$ref ratio=$(awk -v a="$ours" -v b="$ref" 'BEGIN{printf "%.2f", (b > 0 ? a / b : 0)}')"
  else
    echo "LANE_RATIO size=$size missing (ours='$ours' ib_write_bw='$ref')"; PASS=1
  fi
  # The product path: engine RANGE_GET (HTTP request + gateway RDMA WRITE) vs ib_write_bw.
  get=$(sed -n "s/^VERBS_GET_BW size=$size .*MiBps=\([0-9.]*\).*/\1/p" "$OUT/ours.txt" 2>/dev/null | sort -g | tail -n1)
  if [ -n "$get" ] && [ -n "$ref" ]; then
    echo "LANE_GET_RATIO size=$size get_MiBps=$get ib_write_bw_MiBps=$ref ratio=$(awk -v a="$get" -v b="$ref" 'BEGIN{printf "%.2f", (b > 0 ? a / b : 0)}')"
  else
    echo "LANE_GET_RATIO size=$size missing (get='$get' ib_write_bw='$ref')"; PASS=1
  fi
done
log "RESULT: $([ $PASS = 0 ] && echo PASS || echo FAIL) (total $(t)s)"
exit $PASS
