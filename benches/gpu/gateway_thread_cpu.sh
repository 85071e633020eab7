#!/usr/bin/env bash
# Where the gateway's CPU per GET goes, by thread group: starts `hipobj serve --fabric soft`
# (build BIN) on SERVER_CPUS, puts a 64 MiB object, warms up with 2,000 range-gets, then runs
# `hipobj bench --fabric FABRIC` (same build) on CLIENT_CPUS and reads every gateway thread's
# CPU time (/proc/PID/task/*/stat) and context switches before and after. Prints one line:
# ops/s and, per thread name (digits dropped: hipobj-gw- = the request threads, hipobj-gw-gate
# = the head gate, soft-io = the soft device's I/O threads), µs of CPU and context switches
# per GET. Interleave builds for an A/B (docs/benchmarks.md, 2026-12-06 08:20 UTC).
#
#   bash benches/gpu/gateway_thread_cpu.sh BIN FABRIC [OPS] [SIZE] [CONC]
#
# Knobs: SERVER_CPUS [8-15], CLIENT_CPUS [0-7]. CPU time is read in clock ticks (10 ms): use
# enough OPS for a few seconds of gateway CPU (40,000 at 64 KiB).
set -uo pipefail
B=$1 F=$2 OPS=${3:-40000} SIZE=${4:-65536} CONC=${5:-16}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
SPID=
trap 'kill $SPID 2>/dev/null; wait $SPID 2>/dev/null; rm -rf "$W"' EXIT
source "$HERE/../soft_gateway.sh"
start_soft_gateway "$B" "$W" 64 taskset -c "${SERVER_CPUS:-8-15}" > /dev/null 2>&1
bench() {
    taskset -c "${CLIENT_CPUS:-0-7}" "$B" bench --fabric "$F" --endpoint-url "$EP" s3://bench/o \
        --size "$SIZE" --concurrency "$CONC" --no-progress "$@"
}
# name, CPU ticks, context switches of each thread.
snap() {
    for t in /proc/"$SPID"/task/*; do
        local name stat
        name=$(sed 's/[0-9]*$//;s/-[0-9]*-$//' "$t/comm")
        read -r -a stat < "$t/stat"
        echo "$name $((stat[13] + stat[14])) $(awk '/^(non)?voluntary_ctxt/ {n += $2} END {print n}' "$t/status")"
    done
}
bench --ops 2000 > /dev/null 2>&1
snap > "$W/a"
bench --ops "$OPS" --json > "$W/out" 2> "$W/err" || { cat "$W/err" >&2; exit 1; }
snap > "$W/b"
python3 - "$W" "$OPS" "$F" "$SIZE" << 'PY'
import collections, json, os, sys
w, ops, fabric, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
hz = os.sysconf("SC_CLK_TCK")
res = [json.loads(l) for l in open(f"{w}/out") if l.startswith("{")]
def load(p):
    cpu, cs = collections.Counter(), collections.Counter()
    for line in open(p):
        name, ticks, switches = line.split()
        cpu[name] += int(ticks)
        cs[name] += int(switches)
    return cpu, cs
(c0, s0), (c1, s1) = load(f"{w}/a"), load(f"{w}/b")
parts = []
for n in sorted(c1):
    us = (c1[n] - c0[n]) * 1e6 / hz / ops
    if us or s1[n] - s0[n]:
        parts.append(f"{n}:{us:.1f}us/{(s1[n] - s0[n]) / ops:.2f}cs")
total = sum(c1[n] - c0[n] for n in c1) * 1e6 / hz / ops
print(f"{fabric} {size} {res[0]['ops_per_s'] if res else 0:8.0f} ops/s gw", "  ".join(parts),
      f"| total {total:.1f} us/op")
PY
