#!/usr/bin/env bash
# hipobj.load_safetensors into cuda:0 on the GPU machine, next to boto3 + safetensors (issue 16).
#
#   here:   bash benches/gpu/python_on_device.sh build     # release wheel + hipobj into .gpu-bin-python/
#   device: run(command="bash benches/gpu/python_on_device.sh", carry=[".gpu-bin-python"])
#   BENCH=put: instead, put_from of a CUDA tensor above the GPU bounce pool in parts
#   (benches/gpu/python_put_parts.py; GIB, PART_MIB).
#
# The device machine has torch and safetensors but no network and no Rust toolchain: the wheel
# is installed from the carried folder into a private --target directory. The script starts
# `hipobj serve` (soft RDMA fabric, serving HTTP too) on 127.0.0.1 for BENCH=put; the load
# benchmark (the default) is benches/gpu/loader_vs_peers.sh, which starts its own server.
# Output (log + JSON) lands in $OUT (the device tool's return folder) or benches/gpu/results/.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=.gpu-bin-python

if [ "${1:-}" = build ]; then
  set -e
  # One profile for both (the shipped-library profile: release without debug info, as for
  # libhipobj.so), so the workspace is built once and the wheel stays small to carry.
  cargo build --locked --profile capi-release -p hipobj-cli --bin hipobj
  rm -rf "$BIN"; mkdir -p "$BIN"
  python3 -m maturin build --locked --profile capi-release -m python/Cargo.toml -o "$BIN" \
    --interpreter python3 --compatibility linux --quiet
  cp target/capi-release/hipobj "$BIN/"
  strip "$BIN/hipobj"
  grep -qx "/$BIN/" .git/info/exclude 2>/dev/null || echo "/$BIN/" >> .git/info/exclude
  ls -la "$BIN"
  exit 0
fi

# The load benchmark (the default) starts its own server and model.
[ "${BENCH:-load}" = put ] || exec bash benches/gpu/loader_vs_peers.sh
DEST=${OUT:-benches/gpu/results}
mkdir -p "$DEST"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
log="$DEST/python-load-$stamp.log"
exec > >(tee "$log") 2>&1
WORK=$(mktemp -d /tmp/hipobj-pybench.XXXXXX)
SERVE_PID=
cleanup() { [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
echo "== machine ($stamp)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
uname -r; nproc; grep MemTotal /proc/meminfo
python3 -c 'import torch, safetensors; print("torch", torch.__version__, "safetensors", safetensors.__version__)'
python3 -c 'import boto3; print("boto3", boto3.__version__)' 2>/dev/null || echo "boto3: absent (urllib baseline)"
# A wheel is a zip archive: unpacking it is installing it when pip is absent.
python3 -m pip install --quiet --no-deps --no-index --target "$WORK/site" "$BIN"/hipobj-*.whl \
  || python3 -m zipfile -e "$BIN"/hipobj-*.whl "$WORK/site" || exit 1
"$BIN/hipobj" serve --root "$WORK/root" --listen 127.0.0.1:0 --fabric soft \
  --access-key benchkey --secret-key benchsecret > "$WORK/serve.out" 2> "$WORK/serve.err" &
SERVE_PID=$!
for _ in $(seq 50); do grep -q "listening on" "$WORK/serve.out" && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$WORK/serve.out" | head -1)
[ -n "$url" ] || { echo "hipobj serve did not start:"; cat "$WORK/serve.err"; exit 1; }
echo "== gateway at $url (soft fabric)"
{
  # A CUDA tensor above the GPU bounce pool, put in parts (benches/gpu/python_put_parts.py).
  PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}" python3 benches/gpu/python_put_parts.py --endpoint "$url" \
    --hipobj-bin "$BIN/hipobj" --gib "${GIB:-2}" --part-mib "${PART_MIB:-64}" \
    --out "$DEST/python-put-parts-$stamp.json"
  exit $?
}
