#!/usr/bin/env bash
# Where a soft range-get run spends its threads: starts `hipobj serve --fabric soft` (gateway
# build G) on SERVER_CPUS, puts a 256 MiB object, runs `hipobj bench --fabric soft` (client
# build C) on CLIENT_CPUS, and once the client's threads are up and a second into the batch
# samples every thread of both processes for one second
# (benches/gpu/thread_sample.py: CPU, state, wchan per thread name). Prints GB/s and p50.
# The measurement that found the soft device's one-I/O-thread bug (docs/benchmarks.md).
#
#   bash benches/gpu/soft_thread_sample.sh CLIENT_BIN GATEWAY_BIN [SIZE] [CONC] [OPS]
#
# Knobs: SERVER_CPUS [8-15], CLIENT_CPUS [0-7], SAMPLE [1] (0: only the result).
set -uo pipefail
C=$1 G=$2 SIZE=${3:-16777216} CONC=${4:-16} OPS=${5:-1000}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
SPID=
trap 'kill $SPID 2>/dev/null; wait $SPID 2>/dev/null; rm -rf "$W"' EXIT
source "$HERE/../soft_gateway.sh"
start_soft_gateway "$G" "$W" 256 taskset -c "${SERVER_CPUS:-8-15}"
echo "=== client=$C gateway=$G size=$SIZE conc=$CONC ops=$OPS"
taskset -c "${CLIENT_CPUS:-0-7}" "$C" bench --fabric soft --endpoint-url "$EP" s3://bench/o --ops "$OPS" \
    --size "$SIZE" --concurrency "$CONC" --json --no-progress > "$W/b.json" 2> "$W/b.err" &
BP=$!
if [[ ${SAMPLE:-1} == 1 ]]; then
    # Once the client has started its threads (a thread born between the two snapshots is
    # left out of them), and a second into the batch.
    for _ in $(seq 100); do
        (($(ls "/proc/$BP/task" 2> /dev/null | wc -l) > 1)) && break
        sleep 0.1
    done
    sleep 1
    python3 "$HERE/thread_sample.py" "gw:$SPID" "cl:$BP"
fi
wait $BP
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("RESULT GB/s", j["gb_per_s"], "p50_us", j.get("p50_us"), "errors", j["errors"])' "$W/b.json" || cat "$W/b.err"
