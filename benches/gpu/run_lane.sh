#!/usr/bin/env bash
# The GPU lane of issue 6, engine-internal staging (EngineBuilder::gpu, Engine::register_device).
#
#   here:   bash benches/gpu/run_lane.sh build      # release builds, stripped into .gpu-bin/
#   device: run(command="bash benches/gpu/run_lane.sh", carry=[".gpu-bin"])   # one call, < 5 min
#
# On the device machine (NVIDIA H200, no Rust toolchain) it runs, in one call:
#   1. gpu_probe: runtime, dmabuf export of cuMemAlloc memory, the pinned host→device ceiling;
#   2. hipobj bench --embedded (in-process gateway, soft RDMA fabric) into VRAM and into host
#      memory, the same batches: 10,000 mixed-size range-gets of a 1 GiB model (every byte read
#      back from VRAM and compared; then PUT and UploadPart from VRAM, read back and compared),
#      10,000 x 64 KiB with and without coalescing (and a second pair for run-to-run spread),
#      256 x 16 MiB of a 4 GiB model (two pairs); each GPU run reports the staging wait (mean and
#      longest time from a range landing in bounce memory to its completion);
#   (the 2026-11-30 runs in docs/gpu.md had the spin on by default and ran '-ns' rows with 0)
#   3. plain hipobj bench against `hipobj serve` (soft fabric) with --memory cuda and host.
# Writes lane-<stamp>.{log,jsonl}, gpu_probe-<stamp>.json, nvidia-smi-<stamp>.csv to $OUT (or
# benches/gpu/results/). Usage: run_lane.sh [RUN-NAME...] runs only the named runs.
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ "${1:-}" = build ]; then
  set -e
  cargo build --release -p hipobj-cli --bin hipobj
  cargo build --release --example gpu_probe -p engine
  mkdir -p .gpu-bin
  cp target/release/hipobj target/release/examples/gpu_probe .gpu-bin/
  strip .gpu-bin/hipobj .gpu-bin/gpu_probe
  grep -qx '/.gpu-bin/' .git/info/exclude 2>/dev/null || echo '/.gpu-bin/' >> .git/info/exclude
  ls -la .gpu-bin
  exit 0
fi

BIN=${BIN:-.gpu-bin}
DEST=${OUT:-benches/gpu/results}
mkdir -p "$DEST"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
log="$DEST/lane-$stamp.log"
jsonl="$DEST/lane-$stamp.jsonl"
rc=0
{
echo "== machine ($stamp)"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total,clocks.sm,clocks.mem,pstate \
  --format=csv | tee "$DEST/nvidia-smi-$stamp.csv"
uname -r; nproc; grep MemTotal /proc/meminfo; ulimit -l
} 2>&1 | tee "$log"

summary() { # name, args, report path
  python3 - "$1" "$2" "$3" "$jsonl" <<'PY' | tee -a "$log"
import json, sys
name, cmd, path, out = sys.argv[1:5]
try:
    r = json.load(open(path))
except Exception as e:
    print("   no report:", e); sys.exit(0)
r["run"] = name; r["args"] = cmd
open(out, "a").write(json.dumps(r) + "\n")
if "bytes_verified" in r:
    print(f"   memory {r['memory']:<5} {r['workload']:<10} ops {r['ops']} errors {r['errors']} "
          f"verified {r['bytes_verified']/2**20:.0f} MiB in {r['elapsed_s']:.3f} s: {r['gb_per_s']:.2f} GB/s "
          f"{r['ops_per_s']:.0f} ops/s; p50 {r['p50_us']:.0f} us p99 {r['p99_us']:.0f} us; cpu {r['cpu_s']:.1f} s; "
          f"copies {r['gpu_copies']} coalesce {r['coalesce']}; stage wait mean/max {r.get('gpu_stage_us')} us; verify {r['verify_s']:.2f} s; upload {r['upload_s']:.1f} s; paths {r['paths']}")
    for k in ("put_from_vram", "upload_part_from_vram"):
        if r.get(k): print(f"   {k}: {r[k]}")
else:
    print(f"   memory {r['memory']:<5} size {r['size']} ops {r['ops']} errors {r['errors']}: {r['gb_per_s']:.2f} GB/s "
          f"{r['ops_per_s']:.0f} ops/s p50 {r['p50_us']:.0f} us p99 {r['p99_us']:.0f} us; copies {r['gpu_copies']} "
          f"of {r['gpu_ranges']} ranges; stage wait mean/max {r.get('gpu_stage_us')} us; errors {r['error_codes']}")
PY
}

emb() {
  local name=$1; shift
  echo "== $name: hipobj bench --embedded $*" | tee -a "$log"
  local t0=$SECONDS
  if timeout 150 "$BIN/hipobj" --json --no-progress bench --embedded "$@" >/tmp/lane.json 2>>"$log"; then :; else
    echo "   exit $?" | tee -a "$log"; rc=1; fi
  summary "$name" "--embedded $*" /tmp/lane.json
  echo "   ($((SECONDS - t0)) s)" | tee -a "$log"
}

plain() {
  local name=$1; shift
  echo "== $name: hipobj bench $*" | tee -a "$log"
  if AWS_ACCESS_KEY_ID=lane AWS_SECRET_ACCESS_KEY=lanesecret timeout 60 "$BIN/hipobj" --json --no-progress \
      --endpoint-url http://127.0.0.1:9107 --region us-east-1 bench "$@" >/tmp/lane.json 2>>"$log"; then :; else
    echo "   exit $?" | tee -a "$log"; rc=1; fi
  summary "$name" "$*" /tmp/lane.json
}

want() { [ ${#ARGS[@]} -eq 0 ] || printf '%s\n' "${ARGS[@]}" | grep -qx "$1"; }
ARGS=("$@")

if want probe; then
  echo "== gpu_probe (dmabuf export, pinned H2D ceiling)" | tee -a "$log"
  "$BIN/gpu_probe" --out "$DEST/gpu_probe-$stamp.json" >/dev/null 2>>"$log" || rc=1
  python3 - "$DEST/gpu_probe-$stamp.json" <<'PY' 2>&1 | tee -a "$log"
import json, sys
p = json.load(open(sys.argv[1]))
b = p["bench"]
for r in b["pinned_h2d"]: print(f"   pinned H2D {r['bytes']>>10:>7} KiB {r['gbps']:6.1f} GB/s")
print(f"   ceiling {b['ceiling_gbps']:.1f} GB/s")
for k in ("dmabuf", "dmabuf_export"):
    if k in p: print("  ", k, json.dumps(p[k])[:400])
PY
fi

RUNS=(
  'cuda-mixed  --memory cuda --object-size 1GiB --ops 10000'
  'host-mixed  --memory host --pinned --verify-after --object-size 1GiB --ops 10000'
  'cuda-64k    --memory cuda --object-size 1GiB --ops 10000 --range-size 64KiB'
  'cuda-64k-nc --memory cuda --object-size 1GiB --ops 10000 --range-size 64KiB --no-coalesce'
  'host-64k    --memory host --pinned --verify-after --object-size 1GiB --ops 10000 --range-size 64KiB'
  'cuda-64k-2  --memory cuda --object-size 1GiB --ops 10000 --range-size 64KiB'
  'host-64k-2  --memory host --pinned --verify-after --object-size 1GiB --ops 10000 --range-size 64KiB'
  'cuda-16m    --memory cuda --object-size 4GiB --ops 256 --range-size 16MiB'
  'host-16m    --memory host --pinned --verify-after --object-size 4GiB --ops 256 --range-size 16MiB'
  'cuda-16m-2  --memory cuda --object-size 4GiB --ops 256 --range-size 16MiB'
  'host-16m-2  --memory host --pinned --verify-after --object-size 4GiB --ops 256 --range-size 16MiB'
)
for r in "${RUNS[@]}"; do
  name=${r%% *}
  want "$name" || continue
  # shellcheck disable=SC2086
  emb $r
done

if want plain; then
  srv=$(mktemp -d); head -c $((256 << 20)) /dev/urandom > /tmp/lane-obj
  export AWS_ACCESS_KEY_ID=lane AWS_SECRET_ACCESS_KEY=lanesecret
  "$BIN/hipobj" serve --listen 127.0.0.1:9107 --root "$srv" --fabric soft >>"$log" 2>&1 &
  spid=$!
  sleep 1
  cli=("$BIN/hipobj" --endpoint-url http://127.0.0.1:9107 --region us-east-1)
  "${cli[@]}" mb s3://lane >>"$log" 2>&1 && "${cli[@]}" put /tmp/lane-obj s3://lane/obj >>"$log" 2>&1 \
    || { echo "   upload for plain bench failed" | tee -a "$log"; rc=1; }
  plain plain-cuda-64k s3://lane/obj --size 64KiB --ops 10000 --concurrency 16 --memory cuda
  plain plain-host-64k s3://lane/obj --size 64KiB --ops 10000 --concurrency 16 --memory host --pinned
  plain plain-cuda-16m s3://lane/obj --size 16MiB --ops 256 --concurrency 16 --memory cuda
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  rm -rf "$srv" /tmp/lane-obj
fi
echo "== lane exit $rc" | tee -a "$log"
exit $rc
