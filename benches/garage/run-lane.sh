#!/usr/bin/env bash
# Opt-in lane: Garage (a real distributed S3 store) as the gateway's --upstream.
#
#   nice -n 10 cargo install --locked garage@2.5.0 --root benches/garage/.tools   # once, ~10 min on 2 cores
#   cargo build --release -p hipobj-cli --bin hipobj
#   benches/garage/run-lane.sh            # KEEP=1 keeps the work dir and logs
#
# Starts a single-node Garage (replication factor 1, region "garage") in a temp dir, gives it a
# layout, a key and a bucket, then `hipobj serve --upstream <garage> --fabric soft` in front of it
# with its own client key, and drives the `hipobj` CLI through the gateway (mb, multipart put,
# soft-fabric put/get/range-get, ls, rm), comparing bytes with cmp. Every object is also read
# straight from Garage with Garage's key, to prove the bridge stored the real bytes there.
# Prints PASS/FAIL per step with timings; exits 0 only if every step passed.
set -u -o pipefail

cd "$(dirname "$0")/../.."
GARAGE=${GARAGE:-benches/garage/.tools/bin/garage}
HIPOBJ=${HIPOBJ:-target/release/hipobj}
for b in "$GARAGE" "$HIPOBJ"; do
    [ -x "$b" ] || { echo "FAIL: $b not found (see the header of $0)"; exit 2; }
done
if ! "$HIPOBJ" get --help | grep -q -- '--fabric'; then
    echo "FAIL: $HIPOBJ has no 'get --fabric' (rebuild: cargo build --release -p hipobj-cli)"
    exit 2
fi

LANE_T0=$(date +%s.%N)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hipobj-garage-lane.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    if [ "${KEEP:-0}" = 1 ]; then echo "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

FAILS=0
PASSES=0
# step NAME CMD...: runs CMD, prints PASS/FAIL with its wall time; output goes to $WORK/NAME.log.
step() {
    local name=$1
    shift
    local t0 t1
    t0=$(now)
    if "$@" >"$WORK/$name.log" 2>&1; then
        t1=$(now)
        PASSES=$((PASSES + 1))
        printf 'PASS %-28s %7ss\n' "$name" "$(secs "$t0" "$t1")"
    else
        t1=$(now)
        FAILS=$((FAILS + 1))
        printf 'FAIL %-28s %7ss\n' "$name" "$(secs "$t0" "$t1")"
        sed 's/^/    | /' "$WORK/$name.log" | tail -n 15
    fi
}
# must: a step the rest of the lane cannot go on without.
must() {
    step "$@"
    if [ "$FAILS" -gt 0 ]; then
        echo "RESULT: FAIL (stopped at $1; logs in $WORK, run with KEEP=1 to keep them)"
        exit 1
    fi
}

# ---- Garage -------------------------------------------------------------------------------
S3_PORT=$(free_port)
RPC_PORT=$(free_port)
CFG=$WORK/garage.toml
cat >"$CFG" <<EOF
metadata_dir = "$WORK/meta"
data_dir = "$WORK/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$RPC_PORT"
rpc_public_addr = "127.0.0.1:$RPC_PORT"
rpc_secret = "$(openssl rand -hex 32)"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$S3_PORT"
root_domain = ".s3.garage.localhost"
EOF
chmod 600 "$CFG"
g() { "$GARAGE" -c "$CFG" "$@"; }

garage_start() {
    "$GARAGE" -c "$CFG" server >"$WORK/garage-server.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 100); do
        g status >/dev/null 2>&1 && return 0
        kill -0 "${PIDS[-1]}" 2>/dev/null || { cat "$WORK/garage-server.log"; return 1; }
        sleep 0.2
    done
    cat "$WORK/garage-server.log"
    return 1
}
garage_layout() {
    local node
    node=$(g node id -q 2>/dev/null | cut -d@ -f1)
    [ -n "$node" ] || { g status; return 1; }
    g layout assign -z dc1 -c 1G "$node" && g layout apply --version 1 && g status
}
garage_key_bucket() {
    local out
    out=$(g key create lane-key) || return 1
    echo "$out"
    GK_ID=$(echo "$out" | sed -n 's/^Key ID:[[:space:]]*//p' | head -n 1 | tr -d '[:space:]')
    GK_SECRET=$(echo "$out" | sed -n 's/^Secret key:[[:space:]]*//p' | head -n 1 | tr -d '[:space:]')
    [ -n "$GK_ID" ] && [ -n "$GK_SECRET" ] || { echo "could not parse key id/secret"; return 1; }
    # The gateway's `mb` becomes a CreateBucket signed with this key.
    g key allow --create-bucket lane-key || return 1
    # A bucket made the Garage way too, shared with the key.
    for _ in $(seq 1 25); do g bucket create lane-cli && break; sleep 0.2; done
    g bucket allow --read --write --owner lane-cli --key lane-key
}
must garage-start garage_start
must garage-layout garage_layout
GK_ID=
GK_SECRET=
garage_key_bucket >"$WORK/garage-key-bucket.log" 2>&1
if [ -n "$GK_ID" ] && [ -n "$GK_SECRET" ]; then
    PASSES=$((PASSES + 1))
    echo "PASS garage-key-bucket (key $GK_ID)"
else
    sed 's/^/    | /' "$WORK/garage-key-bucket.log" | tail -n 15
    echo "RESULT: FAIL (stopped at garage-key-bucket)"
    exit 1
fi
GARAGE_URL=http://127.0.0.1:$S3_PORT

# ---- Gateway in front of Garage --------------------------------------------------------------
GW_KEY=hipobj-lane
GW_SECRET=$(openssl rand -hex 20)
GW_PORT=$(free_port)
gateway_start() {
    "$HIPOBJ" serve --listen "127.0.0.1:$GW_PORT" --upstream "$GARAGE_URL" \
        --access-key "$GW_KEY" --secret-key "$GW_SECRET" \
        --upstream-access-key "$GK_ID" --upstream-secret-key "$GK_SECRET" \
        --region garage --fabric soft >"$WORK/gateway.out" 2>"$WORK/gateway.err" &
    PIDS+=($!)
    for _ in $(seq 1 100); do
        grep -q '^listening on ' "$WORK/gateway.out" 2>/dev/null && { cat "$WORK/gateway.out"; return 0; }
        kill -0 "${PIDS[-1]}" 2>/dev/null || { cat "$WORK/gateway.err"; return 1; }
        sleep 0.1
    done
    return 1
}
must gateway-start gateway_start
GW_URL=http://127.0.0.1:$GW_PORT

# Isolated from any ~/.aws profile.
export AWS_CONFIG_FILE=$WORK/aws-config AWS_SHARED_CREDENTIALS_FILE=$WORK/aws-credentials
touch "$AWS_CONFIG_FILE" "$AWS_SHARED_CREDENTIALS_FILE"
unset AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_SESSION_TOKEN
gw() {
    AWS_ACCESS_KEY_ID=$GW_KEY AWS_SECRET_ACCESS_KEY=$GW_SECRET \
        "$HIPOBJ" --endpoint-url "$GW_URL" --region garage --addressing-style path --no-progress "$@"
}
direct() {
    AWS_ACCESS_KEY_ID=$GK_ID AWS_SECRET_ACCESS_KEY=$GK_SECRET \
        "$HIPOBJ" --endpoint-url "$GARAGE_URL" --region garage --addressing-style path --no-progress "$@"
}

BIG=$WORK/big.bin
SMALL=$WORK/small.bin
head -c $((20 << 20)) /dev/urandom >"$BIG"
head -c $((1 << 20)) /dev/urandom >"$SMALL"
RA=1234567
RB=9876543
tail -c +$((RA + 1)) "$BIG" | head -c $((RB - RA + 1)) >"$WORK/big.range.expect"
tail -c 1000 "$SMALL" >"$WORK/small.suffix.expect"

# json_is FILE FIELD VALUE: the JSON document on FILE's last line has FIELD == VALUE.
json_is() {
    local got
    got=$(tail -n 1 "$1" | jq -r ".$2")
    echo "$2 = $got (want $3)"
    [ "$got" = "$3" ]
}
put_big() {
    gw --json put --fabric soft "$BIG" s3://lane-gw/dir/big.bin | tee "$WORK/put-big.json" &&
        tail -n 1 "$WORK/put-big.json" | jq -e '.parts >= 3' >/dev/null
}
put_small() {
    gw --json put --fabric soft "$SMALL" s3://lane-gw/small.bin | tee "$WORK/put-small.json" &&
        json_is "$WORK/put-small.json" path rdma-soft
}
# get_soft NAME SRC EXPECT [--range R]: a soft-fabric GET through the gateway, rdma-soft, cmp.
get_soft() {
    local name=$1 src=$2 expect=$3
    shift 3
    gw --json get --fabric soft "$@" "$src" "$WORK/$name.out" | tee "$WORK/$name.json" &&
        json_is "$WORK/$name.json" path rdma-soft && cmp "$expect" "$WORK/$name.out"
}
get_direct() {
    local name=$1 src=$2 expect=$3
    shift 3
    direct get "$@" "$src" "$WORK/$name.out" && cmp "$expect" "$WORK/$name.out"
}
ls_has() {
    local who=$1 uri=$2
    shift 2
    local out
    out=$($who ls -r "$uri") || return 1
    echo "$out"
    for k in "$@"; do echo "$out" | grep -qF -- "$k" || { echo "missing: $k"; return 1; }; done
}
ls_lacks() {
    local who=$1 uri=$2 k=$3
    local out
    out=$($who ls -r "$uri") || return 1
    echo "$out"
    ! echo "$out" | grep -qF -- "$k"
}
# gone_direct URI: Garage itself answers 404 for the key.
gone_direct() {
    local out
    if out=$(direct head "$1" 2>&1); then echo "$out"; return 1; fi
    echo "$out"
    echo "$out" | grep -qE 'NoSuchKey|404'
}

step gw-mb gw mb s3://lane-gw
step gw-put-20MiB-multipart put_big
step gw-put-1MiB-soft put_small
step gw-get-20MiB-soft get_soft gw-get-big s3://lane-gw/dir/big.bin "$BIG"
step gw-get-1MiB-soft get_soft gw-get-small s3://lane-gw/small.bin "$SMALL"
step gw-range-get-soft get_soft gw-range-big s3://lane-gw/dir/big.bin "$WORK/big.range.expect" \
    --range "$RA-$RB"
step gw-suffix-range-soft get_soft gw-suffix-small s3://lane-gw/small.bin \
    "$WORK/small.suffix.expect" --range -1000
step gw-ls ls_has gw s3://lane-gw dir/big.bin small.bin
step garage-direct-get-20MiB get_direct direct-big s3://lane-gw/dir/big.bin "$BIG"
step garage-direct-get-1MiB get_direct direct-small s3://lane-gw/small.bin "$SMALL"
step garage-direct-range get_direct direct-range s3://lane-gw/dir/big.bin \
    "$WORK/big.range.expect" --range "$RA-$RB"
step garage-direct-ls ls_has direct s3://lane-gw dir/big.bin small.bin
# The bucket Garage's CLI made, used through the bridge.
step gw-put-cli-bucket gw put --fabric soft "$SMALL" s3://lane-cli/x/small.bin
step garage-direct-get-cli-bucket get_direct direct-cli s3://lane-cli/x/small.bin "$SMALL"
step gw-rm-small gw rm s3://lane-gw/small.bin
step gw-ls-after-rm ls_lacks gw s3://lane-gw small.bin
step garage-direct-gone gone_direct s3://lane-gw/small.bin
step gw-rm-big gw rm s3://lane-gw/dir/big.bin
step garage-direct-gone-big gone_direct s3://lane-gw/dir/big.bin

echo "$("$GARAGE" --version 2>/dev/null | head -n 1); $("$HIPOBJ" --version)"
if [ "$FAILS" -eq 0 ]; then
    echo "RESULT: PASS ($PASSES steps, $(secs "$LANE_T0" "$(now)")s in all)"
else
    echo "RESULT: FAIL ($FAILS of $((PASSES + FAILS)) steps failed; KEEP=1 keeps $WORK)"
    exit 1
fi
