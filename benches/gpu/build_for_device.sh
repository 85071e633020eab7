#!/usr/bin/env bash
# Builds the x86-64 binaries the device machine runs (it has no Rust toolchain) and copies
# them, stripped, to .gpu-bin/ (ignored by git; carried by the device tool). See
# run_on_device.sh for the one command that follows.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --profile capi-release --example gpu_probe -p engine
test_bin=$(cargo test --profile capi-release -p engine --test gpu_cuda --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gpu_cuda" and m.get("executable"): print(m["executable"])')
mkdir -p .gpu-bin
cp target/capi-release/examples/gpu_probe .gpu-bin/gpu_probe
cp "$test_bin" .gpu-bin/gpu_cuda
strip .gpu-bin/gpu_probe .gpu-bin/gpu_cuda
grep -qx '/.gpu-bin/' .git/info/exclude 2>/dev/null || echo '/.gpu-bin/' >> .git/info/exclude
ls -la .gpu-bin
