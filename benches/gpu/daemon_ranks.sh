#!/usr/bin/env bash
# 8 ranks' safetensors shards into cuda:0 through `hipobj daemon`, next to one process with its
# own engine and to 8 processes with their own engines (issue 34): benches/gpu/daemon_ranks.py
# over HTTP and the soft fabric, `hipobj serve` on SERVER_CPUS, the daemon and every loader on
# CLIENT_CPUS, every tensor checked with torch.equal.
#
#   here:   bash benches/gpu/python_on_device.sh build     # hipobj + wheel into .gpu-bin-python/
#   device: run(command="bash benches/gpu/daemon_ranks.sh", carry=[".gpu-bin-python"])
#
# Knobs: SHARDS [8], SHARD_MIB [512], RUNS [3] (rounds of every scenario), FABRICS ["http soft"], SERVER_CPUS [0-7],
# CLIENT_CPUS [8-15]. Output (log + JSON) in $OUT or benches/gpu/results/.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=.gpu-bin-python
DEST=${OUT:-benches/gpu/results}
mkdir -p "$DEST"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
exec > >(tee "$DEST/daemon-ranks-$stamp.log") 2>&1
WORK=$(mktemp -d /tmp/hipobj-ranks.XXXXXX)
SPID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null; rm -rf "$WORK"' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc
python3 -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$BIN"/hipobj-*.whl || exit 1
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export AWS_ACCESS_KEY_ID=benchkey AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1
mkdir -p "$WORK/root"
taskset -c "${SERVER_CPUS:-0-7}" "$BIN/hipobj" serve --root "$WORK/root" --listen "127.0.0.1:$PORT" \
  --fabric soft --access-key benchkey --secret-key benchsecret > "$WORK/server.log" 2>&1 &
SPID=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
echo "== server: hipobj serve on cpus ${SERVER_CPUS:-0-7}; daemon and loaders on ${CLIENT_CPUS:-8-15}"
upload=--upload
rc=0
for fabric in ${FABRICS:-http soft}; do
  taskset -c "${CLIENT_CPUS:-8-15}" python3 benches/gpu/daemon_ranks.py --endpoint "http://127.0.0.1:$PORT" \
    --hipobj-bin "$BIN/hipobj" --fabric "$fabric" --shards "${SHARDS:-8}" --shard-mib "${SHARD_MIB:-512}" \
    --runs "${RUNS:-3}" --daemon-cpus "${CLIENT_CPUS:-8-15}" --workdir "$WORK" $upload \
    --out "$DEST/daemon-ranks-$fabric-$stamp.json" || rc=1
  upload=
done
tail -3 "$WORK/server.log"
exit $rc
