#!/usr/bin/env bash
# GPU probe + copy benchmark on the device machine (NVIDIA H200), in one call.
#
# The device machine has no Rust toolchain and no network, so the x86-64 binaries are built
# on the development machine and carried along:
#
#   benches/gpu/build_for_device.sh            # here: builds and copies binaries to .gpu-bin/
#   run(command="bash benches/gpu/run_on_device.sh", carry=[".gpu-bin"])   # device tool
#
# It runs the GPU integration tests (engine/tests/gpu_cuda.rs, GPU required), then
# examples/gpu_probe (JSON), an independent PyTorch cross-check of the pinned H2D ceiling,
# and nvidia-smi. Everything lands in $OUT (the device tool's return folder) or
# benches/gpu/results/ when run elsewhere. Copy the JSON into benches/gpu/results/ and the
# numbers into docs/gpu.md by hand: never a number that was not measured.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.gpu-bin}
DEST=${OUT:-benches/gpu/results}
mkdir -p "$DEST"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
rc=0

echo "== machine ($stamp)"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total,clocks.sm,clocks.mem,pstate \
  --format=csv | tee "$DEST/nvidia-smi-$stamp.csv"
uname -r; nproc; grep MemTotal /proc/meminfo

echo "== gpu integration tests"
HIPOBJ_REQUIRE_GPU=1 "$BIN/gpu_cuda" --include-ignored --test-threads=1 2>&1 | tee "$DEST/gpu_cuda-tests-$stamp.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1

echo "== gpu_probe"
"$BIN/gpu_probe" --out "$DEST/gpu_probe-$stamp.json" >/dev/null 2>"$DEST/gpu_probe-$stamp.stderr" || rc=1
cat "$DEST/gpu_probe-$stamp.stderr"

echo "== pytorch cross-check of the pinned H2D ceiling"
timeout 120 python3 - <<'PY' 2>&1 | tee "$DEST/torch-h2d-$stamp.txt"
import torch, time
for mib in (1, 16, 256):
    n = mib << 20
    src = torch.empty(n, dtype=torch.uint8).pin_memory(); src.random_(0, 255)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    reps = max(4, 2048 // mib)
    dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps): dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(); best.append(n * reps / (time.perf_counter() - t) / 1e9)
    best.sort(); print(f"torch pinned H2D {mib} MiB: {best[len(best)//2]:.1f} GB/s (median of 5 x {reps})")
PY

echo "== summary"
python3 - "$DEST/gpu_probe-$stamp.json" <<'PY' || rc=1
import json, sys
d = json.load(open(sys.argv[1])); g = d["gpu"]; b = d["bench"]
print(g["device_name"], g["pci_bus_id"], g["runtime"], "dmabuf:", g["dmabuf_export"])
print("pointer kinds:", d["pointer_kinds"])
for k, v in d["dmabuf"].items():
    if isinstance(v, dict): print("dmabuf", k, {x: v.get(x) for x in ("ok", "dmabuf_offset", "exported_size", "fd_size_by_lseek", "fd_link", "error")})
for r in b["pinned_h2d"]: print(f"pinned H2D {r['bytes']>>10:>7} KiB {r['gbps']:6.1f} GB/s  lat {r['latency_us_median']:.1f} us")
for r in b["pageable_h2d"]: print(f"pageable H2D {r['bytes']>>10:>7} KiB {r['gbps']:6.1f} GB/s")
print(f"pinned D2H {b['pinned_d2h']['gbps']:.1f} GB/s; ceiling {b['ceiling_gbps']:.1f} GB/s")
s = b["small_ranges"]
for k in ("one_copy_per_range", "coalesced"): print(k, {x: s[k][x] for x in ("copies", "gbps", "ranges_per_s", "verified")})
print("elapsed", round(d["elapsed_s"], 1), "s")
PY
exit $rc
