#!/usr/bin/env bash
# The main job until the embedded gateway lands: start a real S3 server (s3s-fs) on 127.0.0.1,
# upload a 20 MiB random file with `hipobj put` (multipart), read byte ranges back with
# `hipobj get --range`, verify every byte, list, and show what a wrong secret looks like.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export PATH="$ROOT/.tools/bin:$HOME/.cargo/bin:$PATH"

./benches/scripts/install-s3s-fs.sh
# HIPOBJ=path/to/hipobj uses an existing binary instead of building the release one.
if [ -z "${HIPOBJ:-}" ]; then
    echo "== building hipobj (release)"
    cargo build --release --locked -p hipobj-cli
    HIPOBJ="$ROOT/target/release/hipobj"
fi

WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$WORK/data"
s3s-fs --host 127.0.0.1 --port "$PORT" --access-key demo-access --secret-key demo-secret "$WORK/data" >"$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done

export AWS_ACCESS_KEY_ID=demo-access AWS_SECRET_ACCESS_KEY=demo-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$PORT"

head -c $((20 * 1024 * 1024)) /dev/urandom >"$WORK/model.bin"
"$HIPOBJ" mb s3://demo
"$HIPOBJ" put "$WORK/model.bin" s3://demo/model.bin --part-size 8MiB
"$HIPOBJ" ls s3://demo
"$HIPOBJ" head s3://demo/model.bin

printf '\n%-22s %-10s %-8s\n' "range" "bytes" "verified"
for range in 0-4095 1048576-1114111 20971000-20971519 12345-9999999; do
    a=${range%-*}; b=${range#*-}
    "$HIPOBJ" get s3://demo/model.bin "$WORK/part" --range "$range"
    # One process reads the expected bytes (a `tail | head` pipe dies of SIGPIPE under pipefail).
    dd if="$WORK/model.bin" of="$WORK/expect" iflag=skip_bytes,count_bytes bs=1M \
        skip="$a" count=$((b - a + 1)) status=none
    if cmp -s "$WORK/part" "$WORK/expect"; then ok=yes; else ok=NO; fi
    printf '%-22s %-10s %-8s\n' "$range" "$(stat -c %s "$WORK/part")" "$ok"
    [ "$ok" = yes ]
done
"$HIPOBJ" get s3://demo/model.bin "$WORK/whole"
cmp "$WORK/whole" "$WORK/model.bin" && echo "whole object: 20971520 bytes verified"

echo
echo "== a wrong secret must fail with the server's error code:"
if AWS_SECRET_ACCESS_KEY=wrong "$HIPOBJ" ls s3://demo; then echo "unexpected success"; exit 1; fi
echo
echo "== demo finished: every range and the whole object verified"
