#!/usr/bin/env bash
# A safetensors model from S3 into cuda:0, hipobj next to boto3 and Run:ai's streamer (issue 31):
# benches/gpu/loader_vs_peers.py against `hipobj serve` (SERVER=hipobj, the default) or s3s-fs
# (SERVER=s3s-fs), the server on SERVER_CPUS, the loaders on CLIENT_CPUS.
#
#   here:   bash benches/gpu/python_on_device.sh build     # hipobj + wheel into .gpu-bin-python/
#           cp .tools/bin/s3s-fs .gpu-bin-python/           # for SERVER=s3s-fs
#           pip download boto3 botocore s3transfer jmespath runai-model-streamer==0.17.1 \
#             runai-model-streamer-s3==0.17.1 into .whl/ (the device tool's README gives the flags)
#   device: run(command="bash benches/gpu/loader_vs_peers.sh", carry=[".gpu-bin-python", ".whl"])
#
# Knobs: GIB [6.2], RUNS [3], METHODS (loader_vs_peers.py --methods), WHEELS [$BIN], SERVER_CPUS [0-7],
# CLIENT_CPUS [8-15]. Output (log + JSON) in $OUT or benches/gpu/results/.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=.gpu-bin-python
DEST=${OUT:-benches/gpu/results}
mkdir -p "$DEST"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
SERVER=${SERVER:-hipobj}
exec > >(tee "$DEST/loaders-$SERVER-$stamp.log") 2>&1
WORK=$(mktemp -d /tmp/hipobj-loaders.XXXXXX)
SPID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null; rm -rf "$WORK"' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc
# WHEELS: another build's hipobj wheel (an A/B against an older commit, the same server).
python3 -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" .whl/*.whl \
  "${WHEELS:-$BIN}"/hipobj-*.whl || exit 1
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export AWS_ACCESS_KEY_ID=benchkey AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1
mkdir -p "$WORK/root"
if [ "$SERVER" = s3s-fs ]; then
  taskset -c "${SERVER_CPUS:-0-7}" "$BIN/s3s-fs" --host 127.0.0.1 --port "$PORT" \
    --access-key benchkey --secret-key benchsecret "$WORK/root" > "$WORK/server.log" 2>&1 &
  METHODS=${METHODS:-hipobj-http-cuda,hipobj-http-host,hipobj-stream,boto3-pinned,runai}
else
  taskset -c "${SERVER_CPUS:-0-7}" "$BIN/hipobj" serve --root "$WORK/root" --listen "127.0.0.1:$PORT" \
    --fabric soft --access-key benchkey --secret-key benchsecret > "$WORK/server.log" 2>&1 &
fi
SPID=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
echo "== server: $SERVER on cpus ${SERVER_CPUS:-0-7}, loaders on ${CLIENT_CPUS:-8-15}"
taskset -c "${CLIENT_CPUS:-8-15}" python3 benches/gpu/loader_vs_peers.py --endpoint "http://127.0.0.1:$PORT" \
  --hipobj-bin "$BIN/hipobj" --gib "${GIB:-6.2}" --runs "${RUNS:-3}" --server "$SERVER" \
  ${METHODS:+--methods "$METHODS"} --out "$DEST/loaders-$SERVER-$stamp.json" --workdir "$WORK"
rc=$?
tail -5 "$WORK/server.log"
exit $rc
