#!/usr/bin/env bash
# Where a soft range-get run spends its threads: starts `hipobj serve --fabric soft` (gateway
# build G) on SERVER_CPUS, puts a 256 MiB object, runs `hipobj bench --fabric soft` (client
# build C) on CLIENT_CPUS, and 1.5 s in samples every thread of both processes for one second
# (benches/gpu/thread_sample.py: CPU, state, wchan per thread name). Prints GB/s and p50.
# The measurement that found the soft device's one-I/O-thread bug (docs/benchmarks.md).
#
#   bash benches/gpu/soft_thread_sample.sh CLIENT_BIN GATEWAY_BIN [SIZE] [CONC] [OPS]
#
# Knobs: SERVER_CPUS [8-15], CLIENT_CPUS [0-7], SAMPLE [1] (0: only the result).
set -uo pipefail
C=$1 G=$2 SIZE=${3:-16777216} CONC=${4:-16} OPS=${5:-1000}
HERE=$(cd "$(dirname "$0")" && pwd)
export AWS_ACCESS_KEY_ID=hipobjbench AWS_SECRET_ACCESS_KEY=hipobjbenchsecret AWS_REGION=us-east-1
W=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
EP=http://127.0.0.1:$PORT
taskset -c "${SERVER_CPUS:-8-15}" "$G" serve --listen "127.0.0.1:$PORT" --root "$W/root" --fabric soft > "$W/server.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2>/dev/null; wait $SPID 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
head -c $((256 << 20)) /dev/urandom > "$W/obj"
"$G" mb --endpoint-url "$EP" s3://bench > /dev/null
"$G" put --endpoint-url "$EP" --no-progress "$W/obj" s3://bench/o > /dev/null
echo "=== client=$C gateway=$G size=$SIZE conc=$CONC ops=$OPS"
taskset -c "${CLIENT_CPUS:-0-7}" "$C" bench --fabric soft --endpoint-url "$EP" s3://bench/o --ops "$OPS" \
    --size "$SIZE" --concurrency "$CONC" --json --no-progress > "$W/b.json" 2> "$W/b.err" &
BP=$!
if [[ ${SAMPLE:-1} == 1 ]]; then
    sleep 1.5
    python3 "$HERE/thread_sample.py" "gw:$SPID" "cl:$BP"
fi
wait $BP
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("RESULT GB/s", j["gb_per_s"], "p50_us", j.get("p50_us"), "errors", j["errors"])' "$W/b.json" || cat "$W/b.err"
