#!/bin/bash
# Runs inside a Soft-RoCE VM (started by run-lane.sh; the host's userspace is shared read-only).
# Kernel command line: lane.role=single|server|client, lane.bin=<test binaries>,
# lane.iters64k=N, lane.iters1m=N. Results go to /laneout (the host's $WORK/out-<vm>).
OUT=/laneout; [ -d $OUT ] || OUT=/tmp
ROLE=single; BIN=; N64=1000; N1M=128; PERF=0; ONLY=
for w in $(cat /proc/cmdline); do
  case $w in
    lane.role=*) ROLE=${w#lane.role=};; lane.bin=*) BIN=${w#lane.bin=};;
    lane.iters64k=*) N64=${w#lane.iters64k=};; lane.iters1m=*) N1M=${w#lane.iters1m=};;
    lane.perf=*) PERF=${w#lane.perf=};; lane.getworkers=*) GET_WORKERS=${w#lane.getworkers=};;
    lane.only=*) ONLY=${w#lane.only=};;
  esac
done
now() { cut -d' ' -f1 /proc/uptime; }
note() { echo "[vm $(now)s] $*"; }
FAILED=0; bad() { echo "LANE_FAIL: $*"; FAILED=1; }
# Blocks (≤ 60 s) until something listens on TCP port $1 (perftest's out-of-band exchange).
listening() { local i; for i in $(seq 120); do ss -Hltn "sport = :$1" | grep -q . && return 0; sleep 0.5; done; return 1; }
# The kernel's rxe counters of every device, one line each (completer_retry_err: a send queue
# waited out its ACK timeout or saw a gap and went back; duplicate_request: a responder got a
# request again because its requester retried).
rxe_counters() {
  local d
  for d in /sys/class/infiniband/rxe*; do
    [ -d "$d/ports/1/hw_counters" ] || continue
    echo "LANE_RXE_COUNTERS role=$ROLE dev=${d##*/} $(cd "$d/ports/1/hw_counters" && for c in *; do printf '%s=%s ' "$c" "$(cat "$c")"; done)"
  done
}
finish() {
  rxe_counters
  rdma link delete rxe0 2>/dev/null; rdma link delete rxe1 2>/dev/null
  echo $FAILED > $OUT/status
  [ $FAILED = 0 ] && echo "LANE_GUEST_OK role=$ROLE" || echo "LANE_GUEST_FAILED role=$ROLE"
  exit $FAILED
}

note "role $ROLE, kernel $(uname -r), $(nproc) vCPU"
if [ $ROLE = dmabuf ]; then
  # The engine's dmabuf registrations on the soft device, with a real udmabuf export
  # (CONFIG_UDMABUF): a peer's WRITE/READ through the dmabuf window, then the GPUDirect
  # tier's direct GET and PUT over the soft fabric.
  ip link set lo up   # the gateway and the soft fabric listen on 127.0.0.1
  [ -e /dev/udmabuf ] || modprobe udmabuf
  [ -e /dev/udmabuf ] && note "/dev/udmabuf present" || bad "no /dev/udmabuf"
  export RUST_BACKTRACE=1
  timeout 120 $BIN/soft_dmabuf --ignored --nocapture --test-threads=1 \
      remote_write_lands_in_a_udmabuf || bad "soft_dmabuf with a udmabuf"
  timeout 180 $BIN/gpu_direct --ignored --nocapture --test-threads=1 \
      direct_get_and_put_over_soft_with_a_udmabuf || bad "gpu_direct with a udmabuf"
  finish
fi
for m in virtio_net rdma_rxe ib_uverbs; do modprobe $m || bad "modprobe $m"; done
case $ROLE in client) IP=192.0.2.2;; *) IP=192.0.2.1;; esac
ip link set lo up; ip link set eth0 up; ip addr add $IP/24 dev eth0
rdma link add rxe0 type rxe netdev eth0 || bad "rdma link add rxe0"
# Same rule as engine::verbs::gid (RoCEv2 IPv4 first), for perftest's -x.
GIDX=
for t in /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/*; do
  i=${t##*/}
  [ "$(cat $t 2>/dev/null)" = "RoCE v2" ] || continue
  case $(cat /sys/class/infiniband/rxe0/ports/1/gids/$i) in 0000:0000:0000:0000:0000:ffff:*) GIDX=$i; break;; esac
done
[ -n "$GIDX" ] || { bad "no RoCEv2 IPv4 GID on rxe0"; GIDX=1; }
note "rxe0 up on $IP, RoCEv2 IPv4 GID index $GIDX"

# The product across two VMs: `hipobj serve --fabric verbs` in the server VM, the engine's
# matrix (both dialects, every RDMA op) in the client VM. The client says "done" on TCP 18700.
GW_PORT=9000
export HIPOBJ_TEST_ACCESS=gwtestkey HIPOBJ_TEST_SECRET=gwtestsecret/abcdef0123456789
if [ $ROLE = server ]; then
  if [ "$ONLY" != stripe ]; then
      timeout 120 $BIN/verbs_rc_peer server 18600 rxe0 | tee /tmp/peer.txt
      grep -q VERBS_PEER_SERVER_OK /tmp/peer.txt || bad "verbs_rc_peer server"
  fi
  mkdir -p /tmp/gwroot/capi-bucket
  timeout 800 $BIN/hipobj serve --access-log --fabric verbs --rdma-device rxe0 --rdma-transfer-timeout 300 --listen $IP:$GW_PORT --root /tmp/gwroot \
      --access-key $HIPOBJ_TEST_ACCESS --secret-key $HIPOBJ_TEST_SECRET > /tmp/serve.txt 2>&1 & GW=$!
  listening $GW_PORT || bad "hipobj serve --fabric verbs did not listen"; cat /tmp/serve.txt
  timeout 780 /run/busybox nc -l -p 18700 > /dev/null || bad "no 'done' from the client VM"
  kill $GW 2>/dev/null; wait $GW 2>/dev/null
  # The access log (--access-log) has a line per request; the v2 control requests and the
  # refusals say why a hipobj-rc-v2 op would fall back (verbs_striping fails on it).
  note "gateway log (v2 control requests, 4xx/5xx answers, everything else that is not a request):"
  grep -vE '^[0-9T:.-]+Z (GET|PUT|POST|DELETE|HEAD) ' /tmp/serve.txt || true
  grep -E '/\.hipobj-rc/(prepare|ready|cancel)| [45][0-9][0-9] [0-9A-F]+ ' /tmp/serve.txt || true
  finish
elif [ $ROLE = client ]; then
  for i in $(seq 60); do ping -c1 -W1 192.0.2.1 >/dev/null 2>&1 && break; done
  if [ "$ONLY" != stripe ]; then
    timeout 120 $BIN/verbs_rc_peer client 192.0.2.1:18600 rxe0 | tee /tmp/peer.txt
    grep -q VERBS_PEER_CLIENT_OK /tmp/peer.txt || bad "verbs_rc_peer client"
  fi
  for i in $(seq 120); do (echo > /dev/tcp/192.0.2.1/$GW_PORT) 2>/dev/null && break; sleep 0.5; done
  if [ "$ONLY" != stripe ]; then
    ENGINE_TEST_NIC=rxe0 HIPOBJ_VERBS_GATEWAY=192.0.2.1:$GW_PORT RUST_BACKTRACE=1 \
      timeout 300 $BIN/rdma_matrix --ignored --nocapture --test-threads=1 \
        verbs_rc_persistent_all_ops verbs_rc_v2_all_ops || bad "rdma_matrix across two VMs"
    # The C API (capi/tests/c/, hipObjConfig_t.fabric = HIPOBJ_FABRIC_VERBS): every op of the
    # Quick Start and the 1,000-op batch must report rdma-verbs (per op and in hipObjGetStats),
    # byte-exact. HIPOBJ_LOG=debug shows the engine's pairing events.
    EP=http://192.0.2.1:$GW_PORT
    HIPOBJ_LOG=debug timeout 300 $BIN/capi_quickstart $EP $HIPOBJ_TEST_ACCESS $HIPOBJ_TEST_SECRET \
      capi-bucket rdma-verbs 0 verbs 2>&1 | tee /tmp/capi-quickstart.txt
    grep -q "^quickstart ok" /tmp/capi-quickstart.txt || bad "C API quickstart over rdma-verbs"
    HIPOBJ_LOG=debug timeout 300 $BIN/capi_batch $EP $HIPOBJ_TEST_ACCESS $HIPOBJ_TEST_SECRET \
      capi-bucket rdma-verbs verbs 2>&1 | tee /tmp/capi-batch.txt
    grep -q "^batch ok" /tmp/capi-batch.txt || bad "C API batch over rdma-verbs"
    # The same Quick Start under HIPOBJ_FABRIC_AUTO, paths not required: which path each op
    # took and why (the pairing events) go to the log.
    HIPOBJ_LOG=debug timeout 300 $BIN/capi_quickstart $EP $HIPOBJ_TEST_ACCESS $HIPOBJ_TEST_SECRET \
      capi-bucket - 0 auto 2>&1 | sed 's/^/capi-auto: /'
  fi
  # Striping over two devices (rxe0 on eth0, rxe1 on eth1) against the gateway in VM A, both
  # dialects: a 64 MiB RANGE_GET lands on both devices (engine and kernel counters), PUT and
  # whole GET byte-exact with their striping reported; then rxe1's netdev down: everything
  # on rxe0, nothing lost (the test sets eth1 down and up again itself).
  # The second NIC comes up only now, so every step above runs on rxe0 alone as before. Both
  # NICs are on one segment: each answers ARP only for its own address and sends from it,
  # so rxe1's RoCE traffic stays on eth1.
  if [ -e /sys/class/net/eth1 ]; then
    sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
    ip link set eth1 up; ip addr add 192.0.2.3/24 dev eth1
    rdma link add rxe1 type rxe netdev eth1 || bad "rdma link add rxe1"
    note "rxe1 up on 192.0.2.3 (eth1)"
  fi
  if [ -e /sys/class/infiniband/rxe1 ]; then
    T=$(now)
    : > /tmp/stripe.txt
    for t in verbs_striped_64_mib_on_two_devices verbs_one_device_down_all_chunks_on_the_other; do
      VERBS_STRIPE_LOG=1 ENGINE_TEST_NICS=rxe0,rxe1 VERBS_STRIPE_TAKE_DOWN=rxe1 HIPOBJ_VERBS_GATEWAY=192.0.2.1:$GW_PORT \
        RUST_BACKTRACE=1 timeout 400 $BIN/verbs_striping --ignored --nocapture --exact $t \
        >> /tmp/stripe.txt 2>&1 || bad "verbs_striping $t across two VMs"
    done
    cat /tmp/stripe.txt
    note "striping over rxe0+rxe1 took $(awk "BEGIN{print $(now) - $T}")s"
    grep -o 'VERBS_STRIPE .*' /tmp/stripe.txt > $OUT/stripe.txt
    grep -o 'VERBS_STRIPE_FAIL .*' /tmp/stripe.txt >> $OUT/stripe.txt || true
  else
    bad "no rxe1: the client VM was started without its second NIC"
  fi
  echo done > /dev/tcp/192.0.2.1/18700 || bad "could not tell the server VM we are done"
  finish
fi

export ENGINE_TEST_NIC=rxe0 VERBS_EXPECT_DEVICE=1 RUST_BACKTRACE=1
# The engine's threads over verbs (issue 13): a 10,000-op rc-persistent batch and a 200-op
# hipobj-rc-v2 batch against a gateway child on rxe0; every sample is exactly the workers.
threads_over_verbs() {
  timeout 420 $BIN/workers_threads --ignored --exact --nocapture --test-threads=1 \
      verbs_threads_are_workers_nothing_per_op > /tmp/threads.txt 2>&1
  cat /tmp/threads.txt
  grep -q "test result: ok. 1 passed" /tmp/threads.txt || bad "workers_threads over verbs"
}
[ "$ONLY" = threads ] && { threads_over_verbs; finish; }
export VERBS_BENCH_SIZES=65536:$N64,1048576:$N1M VERBS_BENCH_DEPTH=128
T=$(now)
$BIN/verbs_probe --nocapture --test-threads=1 || bad "verbs_probe"
$BIN/verbs_rxe --ignored --nocapture --test-threads=1 \
    rc_write_write_imm_read_byte_exact modify_qp_errors_are_actionable || bad "verbs_rxe correctness"
# Two processes in this VM (rxe loopback), the out-of-band exchange over 127.0.0.1.
timeout 120 $BIN/verbs_rc_peer server 18600 rxe0 > /tmp/peer-srv.txt 2>&1 & SRV=$!
listening 18600 || bad "verbs_rc_peer server did not listen"
timeout 120 $BIN/verbs_rc_peer client 127.0.0.1:18600 rxe0 2>&1 | tee /tmp/peer-cli.txt
wait $SRV; cat /tmp/peer-srv.txt
grep -q VERBS_PEER_CLIENT_OK /tmp/peer-cli.txt || bad "verbs_rc_peer client"
grep -q VERBS_PEER_SERVER_OK /tmp/peer-srv.txt || bad "verbs_rc_peer server"
# The product in one VM: engine + in-process gateway, both dialects, every RDMA op, verbs.
timeout 300 $BIN/rdma_matrix --ignored --nocapture --test-threads=1 \
    verbs_rc_persistent_all_ops verbs_rc_v2_all_ops || bad "rdma_matrix over verbs"
# Hostile tokens against the verbs gateway: the device refuses every access outside the grant.
timeout 300 $BIN/rdma_hostile --ignored --nocapture --test-threads=1 \
    verbs_hostile_tokens_and_foreign_sessions_touch_nothing || bad "rdma_hostile over verbs"
# A third-party-style v2 client on the link-local GID: the gateway pairs from the same family.
timeout 120 $BIN/rdma_v2 --ignored --nocapture --test-threads=1 \
    verbs_link_local_client_pairs_with_a_link_local_gid || bad "rdma_v2 GID family over verbs"
threads_over_verbs
note "engine correctness tests took $(awk "BEGIN{print $(now) - $T}")s"

# Same VM, same sizes: our RC WRITE goodput, then ib_write_bw's, twice over (interleaved, so a
# slow spell of the emulator or the host hits both); the host keeps the best of each.
T=$(now)
: > $OUT/ours.txt; : > $OUT/ref.txt
for rep in 1 2; do
  $BIN/verbs_rxe --ignored --nocapture --test-threads=1 rc_write_goodput > /tmp/ours.txt 2>&1 || { bad "verbs_rxe goodput"; cat /tmp/ours.txt; }
  grep -o 'VERBS_WRITE_BW .*' /tmp/ours.txt | tee -a $OUT/ours.txt
  grep -o 'VERBS_REG_DEREG .*' /tmp/ours.txt
  # The whole product path: engine RANGE_GETs, rc-persistent, in-process gateway RDMA-WRITEs.
  VERBS_GET_WORKERS=${GET_WORKERS:-1} timeout 300 $BIN/rdma_matrix --ignored --nocapture --test-threads=1 verbs_get_goodput > /tmp/get.txt 2>&1 || { bad "rdma_matrix goodput"; cat /tmp/get.txt; }
  grep -o 'VERBS_GET_BW .*' /tmp/get.txt | tee -a $OUT/ours.txt
  for s in 65536:$N64 1048576:$N1M; do
    size=${s%:*}; n=${s#*:}
    timeout 300 ib_write_bw -d rxe0 -x $GIDX -s $size -n $n -F > /tmp/srv.txt 2>&1 & SRV=$!
    listening 18515 || bad "ib_write_bw server did not listen"
    timeout 300 ib_write_bw -d rxe0 -x $GIDX -s $size -n $n -F 127.0.0.1 > /tmp/cli.txt 2>&1 || { bad "ib_write_bw $size"; cat /tmp/cli.txt; }
    wait $SRV
    # the data line: "#bytes #iterations BW-peak BW-average MsgRate" (MB/sec = 2^20 B/s)
    awk -v s=$size '$1==s && NF>=5 {print "IB_WRITE_BW size=" s " iters=" $2 " MiBps=" $4}' /tmp/cli.txt | tee -a $OUT/ref.txt
  done
done
note "goodput comparison took $(awk "BEGIN{print $(now) - $T}")s"
if [ "$PERF" = 1 ]; then
  # LANE_PERF=1: a system-wide profile of the 64 KiB GET loop (kernel symbols copied out).
  VERBS_BENCH_SIZES=65536:1000 perf record -a -g -o $OUT/perf.data \
    $BIN/rdma_matrix --ignored --nocapture --test-threads=1 verbs_get_goodput > /tmp/perf.txt 2>&1
  grep -o 'VERBS_GET_BW .*' /tmp/perf.txt; cp /proc/kallsyms $OUT/kallsyms 2>/dev/null
fi
finish
