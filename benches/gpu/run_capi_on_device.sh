#!/usr/bin/env bash
# The C API's Quick Start with cudaMalloc memory on the device machine (issue 7's GPU test), in
# one call. The device machine has no Rust toolchain: build here, carry, run there.
#
#   benches/gpu/run_capi_on_device.sh build      # here: release test binary + libhipobj.so
#                                                 # (+ C programs prebuilt) into .gpu-bin-capi/
#   run(command="bash benches/gpu/run_capi_on_device.sh", carry=[".gpu-bin-capi"])  # device tool
#
# On the device it runs capi/tests/c_programs.rs (the test binary, which starts the gateway
# in-process and compiles capi/tests/c/*.c with the machine's `cc`, or takes the prebuilt
# programs when there is no `cc`; the static-link test is skipped: libhipobj.a is not carried;
# so are the tests against s3s-fs, which the device machine does not have and CI runs here)
# with HIPOBJ_REQUIRE_GPU=1, so a missing GPU fails the lane.
# Output lands in $OUT (the device tool's return folder), or benches/gpu/results/ elsewhere.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=.gpu-bin-capi

if [ "${1:-}" = build ]; then
  set -e
  exe=$(cargo test --profile capi-release -p hipobj-capi --test c_programs --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "c_programs" and m.get("executable"): print(m["executable"])')
  rm -rf "$BIN"; mkdir -p "$BIN"
  cp "$exe" "$BIN/c_programs"
  cp "$(dirname "$exe")/libhipobj.so" "$BIN/"
  for p in quickstart quickstart_cuda batch errors tokens; do
    cc -std=c11 -Wall -Wextra -Werror -O1 -D_GNU_SOURCE -I capi/include "capi/tests/c/$p.c" \
      -o "$BIN/$p" -L "$BIN" -lhipobj -Wl,-rpath,'$ORIGIN' -lpthread -ldl -lm
  done
  strip "$BIN"/*
  grep -qx '/.gpu-bin-capi/' .git/info/exclude 2>/dev/null || echo '/.gpu-bin-capi/' >> .git/info/exclude
  ls -la "$BIN"
  exit 0
fi

DEST=${OUT:-benches/gpu/results}
mkdir -p "$DEST"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
log="$DEST/capi-cuda-$stamp.log"
{
  echo "== machine ($stamp)"
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv
  uname -r; nproc
  if command -v cc >/dev/null; then echo "cc: $(cc --version | head -1)"; else
    echo "cc: none, using the prebuilt C programs"; export HIPOBJ_PREBUILT_C_DIR=$PWD/$BIN; fi
  echo "== capi C programs (HIPOBJ_REQUIRE_GPU=1)"
} 2>&1 | tee "$log"
[ -x "$(command -v cc)" ] || export HIPOBJ_PREBUILT_C_DIR=$PWD/$BIN
HIPOBJ_REQUIRE_GPU=1 HIPOBJ_CAPI_DIR=$PWD/capi "$BIN/c_programs" --include-ignored --test-threads=1 --nocapture --skip token_helpers_linked_statically --skip s3s_fs 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
echo "== rc $rc" | tee -a "$log"
exit "$rc"
