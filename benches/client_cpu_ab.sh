#!/usr/bin/env bash
# Client CPU of two hipobj builds, paired: one gateway (`A_BIN serve --fabric soft`, core 1)
# over a 256 MiB object, then `farm-bench` (the team's paired-timing tool) runs A and B in turn,
# pinned to core 0, `hipobj bench` range-gets at 1 MiB and 16 MiB. For changes to the client's
# per-byte work on a machine without the cores a throughput comparison needs (read the cpu
# rows; wall time there is the gateway's one core).
#
#   bash benches/client_cpu_ab.sh A_BIN B_BIN [FABRIC (http)] [RUNS (9)]
#
# Used for docs/benchmarks.md, "HTTP payloads read straight into the destination".
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?usage: client_cpu_ab.sh A_BIN B_BIN [FABRIC] [RUNS]} B=${2:?B_BIN missing}
FABRIC=${3:-http} RUNS=${4:-9}
command -v farm-bench > /dev/null || { echo "farm-bench (paired timings) is not installed here" >&2; exit 2; }
source benches/soft_gateway.sh
D=$(mktemp -d)
trap 'kill $SPID 2>/dev/null; rm -rf "$D"' EXIT
start_soft_gateway "$A" "$D" 256 taskset -c 1
for size in 1048576 16777216; do
  ops=$(( size == 1048576 ? 3000 : 200 ))
  args="bench --fabric $FABRIC --endpoint-url $EP s3://bench/o --ops $ops --size $size --concurrency 8 --json"
  echo "== size $size, $ops ops, concurrency 8, fabric $FABRIC"
  # shellcheck disable=SC2086
  farm-bench -n "$RUNS" --pin 0 --timeout 900 --vs "$B $args" -- "$A" $args
done
