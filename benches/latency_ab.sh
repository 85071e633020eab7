#!/usr/bin/env bash
# Per-op latency of two hipobj clients, paired: one gateway (`A_BIN serve --fabric soft`, core 1)
# over a 64 MiB object, then `farm-bench` runs A and B in turn, pinned to core 0: `hipobj bench`
# range-gets at 64 KiB and 1 MiB, concurrency CONC (default 1: one op at a time, so p50 is the
# op's own latency). Prints farm-bench's pairwise ratios and each side's p50 (median, min, max
# over the runs) from the bench's JSON. For latency changes on a machine without the cores a
# throughput comparison needs; the gateway is A's build (B's client talks to it too).
#
#   bash benches/latency_ab.sh A_BIN A_FABRIC B_BIN B_FABRIC [RUNS (7)]
#   e.g. benches/latency_ab.sh .sbs-bin/hipobj soft .sbs-bin/hipobj-before soft
#        benches/latency_ab.sh .sbs-bin/hipobj soft .sbs-bin/hipobj http
#
# Used for docs/benchmarks.md, "Soft GET early answers".
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?usage: latency_ab.sh A_BIN A_FABRIC B_BIN B_FABRIC [RUNS]} FA=${2:?} B=${3:?} FB=${4:?}
RUNS=${5:-7} CONC=${CONC:-1}
command -v farm-bench > /dev/null || { echo "farm-bench (paired timings) is not installed here" >&2; exit 2; }
source benches/soft_gateway.sh
D=$(mktemp -d)
trap 'kill $SPID 2>/dev/null; rm -rf "$D"' EXIT
start_soft_gateway "$A" "$D" 64 taskset -c 1
for size in 65536 1048576; do
  ops=$(( size == 65536 ? 4000 : 1500 ))
  common="--endpoint-url $EP s3://bench/o --ops $ops --size $size --concurrency $CONC --json"
  echo "== size $size, $ops ops, concurrency $CONC: A $A --fabric $FA, B $B --fabric $FB"
  farm-bench -n "$RUNS" --pin 0 --timeout 900 \
    --vs "sh -c 'exec $B bench --fabric $FB $common >> $D/b-$size.json 2>&1'" \
    -- sh -c "exec $A bench --fabric $FA $common >> $D/a-$size.json 2>&1" | grep -E 'A/B|^A |^B '
  python3 - "$D/a-$size.json" "$D/b-$size.json" <<'PY'
import json, sys
for side, path in zip("AB", sys.argv[1:]):
    p50 = sorted(json.loads(l)["p50_us"] for l in open(path) if l.startswith("{"))
    print(f"{side} p50 us: median {p50[len(p50) // 2]:.0f}, min {p50[0]:.0f}, max {p50[-1]:.0f} ({len(p50)} runs)")
PY
done
