#!/usr/bin/env bash
# Superseded by run_lane.sh (engine-internal staging); kept because docs/gpu.md's CLI-side lane
# numbers came from it.
# The GPU lane's embedded runs on the device machine (NVIDIA H200), in one call:
# `hipobj bench --embedded` into VRAM (--memory cuda, host-staged) and into host memory, the
# same batches, plus the pinned host→device ceiling (examples/gpu_probe) measured in the same run.
#
#   here:   cargo build --release -p hipobj-cli --bin hipobj
#           cargo build --release --example gpu_probe -p engine
#           mkdir -p .gpu-bin && cp target/release/hipobj target/release/examples/gpu_probe .gpu-bin/
#           strip .gpu-bin/hipobj .gpu-bin/gpu_probe
#   device: run(command="bash benches/gpu/run_embedded_on_device.sh", carry=[".gpu-bin"])
#
# --verify-after (host): copy into a host image of the object, verify after the timed phase,
# the same shape of work as the VRAM runs (inline verification otherwise dominates host runs).
# Writes to $OUT (or benches/gpu/results/): embedded-<stamp>.jsonl (one JSON report per run,
# with the command line), embedded-<stamp>.log, gpu_probe-<stamp>.json, nvidia-smi-<stamp>.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.gpu-bin}
DEST=${OUT:-benches/gpu/results}
mkdir -p "$DEST"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
log="$DEST/embedded-$stamp.log"
jsonl="$DEST/embedded-$stamp.jsonl"
rc=0
{
echo "== machine ($stamp)"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total,clocks.sm,clocks.mem,pstate \
  --format=csv | tee "$DEST/nvidia-smi-$stamp.csv"
uname -r; nproc; grep MemTotal /proc/meminfo; df -h /tmp | tail -1
} 2>&1 | tee "$log"

one() {
  local name=$1; shift
  echo "== $name: hipobj bench --embedded $*" | tee -a "$log"
  local t0=$SECONDS
  if timeout 240 "$BIN/hipobj" --json --no-progress bench --embedded "$@" >"/tmp/emb.json" 2>>"$log"; then :; else
    echo "   exit $?" | tee -a "$log"; rc=1; fi
  python3 - "$name" "$*" /tmp/emb.json "$jsonl" <<'PY' | tee -a "$log"
import json, sys
name, cmd, path, out = sys.argv[1:5]
try:
    r = json.load(open(path))
except Exception as e:
    print("   no report:", e); sys.exit(0)
r["run"] = name; r["args"] = cmd
open(out, "a").write(json.dumps(r) + "\n")
print(f"   memory {r['memory']:<5} workload {r['workload']:<10} ops {r['ops']} errors {r['errors']} "
      f"verified {r['bytes_verified']/2**20:.0f} MiB in {r['elapsed_s']:.2f} s: {r['gb_per_s']:.2f} GB/s "
      f"{r['ops_per_s']:.0f} ops/s; transfer {r['transfer_gb_per_s']:.2f} GB/s (inline verify {r['inline_verify_s']:.2f} s); "
      f"p50 {r['p50_us']:.0f} us p99 {r['p99_us']:.0f} us; cpu {r['cpu_s']:.1f} s; copies {r['gpu_copies']} "
      f"coalesce {r['coalesce']} verify_after {r['verify_s']:.2f} s; upload {r['upload_s']:.1f} s; paths {r['paths']}")
if r.get("put_from_vram"): print("   PUT from VRAM:", r["put_from_vram"])
PY
  echo "   ($((SECONDS - t0)) s)" | tee -a "$log"
}

echo "== gpu_probe (pinned H2D ceiling)" | tee -a "$log"
"$BIN/gpu_probe" --out "$DEST/gpu_probe-$stamp.json" >/dev/null 2>>"$log" || rc=1
python3 - "$DEST/gpu_probe-$stamp.json" <<'PY' 2>&1 | tee -a "$log"
import json, sys
b = json.load(open(sys.argv[1]))["bench"]
for r in b["pinned_h2d"]: print(f"   pinned H2D {r['bytes']>>10:>7} KiB {r['gbps']:6.1f} GB/s")
print(f"   ceiling {b['ceiling_gbps']:.1f} GB/s")
PY

RUNS=(
  'host-mixed   --memory host --object-size 1GiB --ops 10000'
  'cuda-mixed   --memory cuda --object-size 1GiB --ops 10000'
  'host-64k     --memory host --object-size 1GiB --ops 10000 --range-size 64KiB'
  'cuda-64k     --memory cuda --object-size 1GiB --ops 10000 --range-size 64KiB'
  'cuda-64k-nc  --memory cuda --object-size 1GiB --ops 10000 --range-size 64KiB --no-coalesce'
  'host-16m     --memory host --object-size 4GiB --ops 256 --range-size 16MiB'
  'cuda-16m     --memory cuda --object-size 4GiB --ops 256 --range-size 16MiB'
  'cuda-64m-c32 --memory cuda --object-size 4GiB --ops 64 --range-size 64MiB --concurrency 32'
  'host-mixed-va --memory host --object-size 1GiB --ops 10000 --verify-after'
  'host-64k-va    --memory host --object-size 1GiB --ops 10000 --range-size 64KiB --verify-after'
  'host-16m-va    --memory host --object-size 4GiB --ops 256 --range-size 16MiB --verify-after'
)
# Usage: run_embedded_on_device.sh [RUN-NAME...]  (default: every run below)
for r in "${RUNS[@]}"; do
  name=${r%% *}
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
  # shellcheck disable=SC2086
  one $r
done
exit $rc
