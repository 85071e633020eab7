#!/usr/bin/env bash
# Gateway CPU and syscalls per GET: `hipobj serve --fabric soft` as its own process over a
# 64 MiB object, `hipobj bench --concurrency 16` against it over `--fabric soft` and
# `--fabric http`, for each size. Prints, per fabric and size, the gateway's CPU per op
# (utime+stime delta from /proc/<pid>/stat ÷ ops, warm-up included) for REPS runs, then the
# syscalls per op of one more run under `strace -c -f -p <gateway>`. Method and the last
# table: docs/benchmarks.md, "Gateway CPU per GET, soft vs HTTP".
#
#   cargo build --release -p hipobj-cli
#   benches/gateway_cpu_per_op.sh [path/to/hipobj]
#
# Knobs: SPECS ["65536:2000 1048576:600 16777216:200"] (size:ops), FABRICS ["http soft"],
# REPS [2] (CPU runs per cell; "" for counts only), STRACE [1] (0: no strace pass).
set -euo pipefail
BIN=${1:-$(dirname "$0")/../target/release/hipobj}
[[ -x $BIN ]] || { echo "missing $BIN: cargo build --release -p hipobj-cli" >&2; exit 1; }
SPECS=${SPECS:-"65536:2000 1048576:600 16777216:200"}
FABRICS=${FABRICS:-"http soft"}
REPS=${REPS-"1 2"}
STRACE=${STRACE:-1}
if [[ $STRACE == 1 ]] && ! command -v strace > /dev/null; then
    echo "strace not found (STRACE=0 skips the counts)" >&2; exit 1
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/hipobj-gwcpu.XXXXXX")
SPID=
trap 'kill $SPID 2>/dev/null; wait $SPID 2>/dev/null; rm -rf "$W"' EXIT
source "$(dirname "$0")/soft_gateway.sh"
start_soft_gateway "$BIN" "$W" 64
cpu() { awk '{ print $14 + $15 }' "/proc/$SPID/stat"; }
bench() { # fabric size ops -> JSON in $W/b.json
    "$BIN" bench --fabric "$1" --endpoint-url "$EP" s3://bench/o --ops "$3" --size "$2" \
        --concurrency 16 --json --no-progress > "$W/b.json" 2> "$W/b.err"
}
echo "gateway pid $SPID, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for fabric in $FABRICS; do
    for spec in $SPECS; do
        size=${spec%%:*} ops=${spec##*:}
        bench "$fabric" "$size" 64 # warm
        for rep in $REPS; do
            c0=$(cpu)
            bench "$fabric" "$size" "$ops"
            c1=$(cpu)
            python3 - "$fabric" "$size" "$ops" "$c0" "$c1" "$(getconf CLK_TCK)" "$W/b.json" <<'PY'
import json, sys
f, s, o, c0, c1, hz, p = sys.argv[1:]
j = json.load(open(p))
n = int(o) + int(j.get("warmup_ops", 0))
print(f"cpu    {f:4} {s:>9} B  ops={n}  gateway_cpu_us_per_op={(int(c1) - int(c0)) / int(hz) * 1e6 / n:.1f}"
      f"  GB/s={j['gb_per_s']:.3f}  errors={j['errors']}  paths={j['paths']}")
PY
        done
        if [[ $STRACE == 1 ]]; then
            strace -c -f -p "$SPID" -o "$W/strace.txt" 2> /dev/null &
            stp=$!
            sleep 1
            bench "$fabric" "$size" "$ops"
            kill -INT "$stp"; wait "$stp" || true
            python3 - "$fabric" "$size" "$ops" "$W/strace.txt" "$W/b.json" <<'PY'
import json, sys
f, s, o, p, b = sys.argv[1:]
n = int(o) + int(json.load(open(b)).get("warmup_ops", 0))
calls = {}
for line in open(p):
    parts = line.split()
    if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
        calls[parts[-1]] = int(parts[3])
keys = ["futex", "read", "pread64", "sendto", "sendmsg", "write", "recvfrom", "epoll_ctl"]
print(f"strace {f:4} {s:>9} B  ops={n}  all={sum(calls.values()) / n:.2f}  "
      + "  ".join(f"{k}={calls.get(k, 0) / n:.2f}" for k in keys))
PY
        fi
    done
done
