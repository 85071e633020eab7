#!/usr/bin/env bash
# HTTP range-gets into host memory next to the same range-gets into VRAM (issue 31), on the GPU
# machine: `hipobj serve` (BIN) on SERVER_CPUS with one OBJECT_MIB object, then
# `hipobj bench --fabric http` on CLIENT_CPUS for each SIZE x memory (host, cuda) x bounce pool
# (the engine's default, and BOUNCES). One line per run: GB/s, the client's CPU seconds per GB,
# the bounce pool's size / peak / waits and the mean staging wait (landing → completion).
# `nvidia-smi dmon` samples PCIe traffic meanwhile (dmon.log beside the output).
#
#   device: run(command="bash benches/gpu/http_vram_profile.sh .gpu-bin-python/hipobj", carry=[".gpu-bin-python"])
#
# Knobs: SERVER_CPUS [0-7], CLIENT_CPUS [8-15], OBJECT_MIB [4096], SIZES ["8MiB 1MiB"],
# CONCS ["64"], OPS [2048], BOUNCES ["256MiB": the pool size before issue 31].
set -uo pipefail
B=$1
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${OUT:-$HERE/results}
mkdir -p "$DEST"
W=$(mktemp -d)
SPID=
DPID=
trap 'kill $SPID $DPID 2>/dev/null; wait $SPID 2>/dev/null; rm -rf "$W"' EXIT
source "$HERE/../soft_gateway.sh"
start_soft_gateway "$B" "$W" "${OBJECT_MIB:-4096}" taskset -c "${SERVER_CPUS:-0-7}" > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvidia-smi dmon -s t -d 1 > "$DEST/dmon.log" 2>&1 &
DPID=$!
for conc in ${CONCS:-64}; do
for size in ${SIZES:-8MiB 1MiB}; do
  for mem in host cuda; do
    for bounce in default ${BOUNCES:-256MiB}; do
      [ "$mem" = host ] && [ "$bounce" != default ] && continue
      extra=()
      [ "$bounce" != default ] && extra=(--gpu-bounce "$bounce")
      taskset -c "${CLIENT_CPUS:-8-15}" "$B" bench --fabric http --endpoint-url "$EP" s3://bench/o \
        --size "$size" --concurrency "$conc" --ops "${OPS:-2048}" --memory "$mem" \
        --no-progress --no-verify --json "${extra[@]}" > "$W/out" 2> "$W/err" \
        || { echo "bench $size $mem $bounce failed:"; cat "$W/err"; continue; }
      python3 - "$W/out" "$size" "$mem" "$bounce" "$conc" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
gb = r["gb_per_s"] * r["elapsed_s"]
cap, peak, waits = r.get("gpu_bounce", [0, 0, 0])
print(f"conc={sys.argv[5]:>3} size={sys.argv[2]:>5} mem={sys.argv[3]:<4} bounce={sys.argv[4]:<7} GB/s={r['gb_per_s']:6.2f} "
      f"cpu_s/GB={r.get('cpu_s', 0) / max(gb, 1e-9):.3f} workers={r['workers']} "
      f"pool={cap >> 20}MiB peak={peak >> 20}MiB waits={waits} stage_us={r['gpu_stage_us']} "
      f"p50_us={r.get('p50_us')} p99_us={r.get('p99_us')} paths={r['paths']}")
PY
      cat "$W/out" >> "$DEST/http-vram-bench.jsonl"
    done
  done
done
done
