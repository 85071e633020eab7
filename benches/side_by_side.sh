#!/usr/bin/env bash
# Side-by-side benchmark: hipobj vs aws-sdk-s3, object_store and boto3, against
# the same s3s-fs server on loopback, the same object, the same concurrency,
# in one run. Method and latest table: docs/benchmarks-side-by-side.md.
#
#   benches/side_by_side.sh            # full run (a few seconds per cell)
#   QUICK=1 benches/side_by_side.sh    # short cells, smaller op counts
#
# Environment knobs (defaults in brackets):
#   QUICK [0]          1 = small op counts, 1 run per cell
#   REPEAT [3; 1 if QUICK]  runs per cell; the table shows the median and spread
#   CONC [16]          range-gets in flight for every client
#   SIZES ["4096 65536 1048576 16777216"]   range sizes in bytes
#   OPS_<size>         op count override for one size, e.g. OPS_4096=50000
#   BOTO3_OPS_DIV [8]  boto3 runs ops/DIV (it is ~10x slower; rates stay comparable)
#   CLIENTS ["hipobj aws-sdk-s3 object_store boto3"]; hipobj-http, hipobj-soft, hipobj-verbs
#                      run `hipobj bench --fabric http|soft|verbs` (plain `hipobj`: --fabric auto)
#   HIPOBJ_BENCH_FLAGS extra flags for every hipobj row (e.g. "--workers 8")
#   SERVER [s3s-fs]    s3s-fs, or hipobj (our gateway: `hipobj serve --root`, SERVE_FABRIC [soft])
#   SERVER_CPUS, CLIENT_CPUS   taskset core lists for the server and every client (e.g. 8-15, 0-7)
#   PEER_BIN [benches/peers/target/release]   prebuilt peer binaries (carried to a machine
#                      without cargo; then SKIP_BUILD=1 and SHIM=<prebuilt libnodelay.so>)
#   OBJECT_MIB [256]   size of the random object
#   SEED [42]          offset stream seed (same for every client)
#   SKIP_BUILD [0]     1 = do not (re)build the peers and the shim
#   HIPOBJ [target/release/hipobj]   engine binary (not built by this script)
#   HIPOBJ_CLIENT [$HIPOBJ]   binary of the hipobj rows (e.g. an older build), server stays $HIPOBJ
#   S3S_FS             s3s-fs binary [PATH, ~/.cargo/bin, .tools/bin]
#   QUIET_MAX_S [60; 0 if QUICK]  wait up to this long for load1 < 0.5 first
#   OUT_DIR [benches/results/<date>_<time>]
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
CMDLINE="$(env | { grep -E '^(QUICK|REPEAT|CONC|SIZES|OPS_[0-9]+|BOTO3_OPS_DIV|CLIENTS|OBJECT_MIB|SEED|SERVER|SERVE_FABRIC|SERVER_CPUS|CLIENT_CPUS|HIPOBJ_BENCH_FLAGS)=' || true; } |
    sort | tr '\n' ' ')benches/side_by_side.sh $*"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
    REPEAT=${REPEAT:-1}
    QUIET_MAX_S=${QUIET_MAX_S:-0}
else
    REPEAT=${REPEAT:-3}
    QUIET_MAX_S=${QUIET_MAX_S:-60}
fi
CONC=${CONC:-16}
SIZES=${SIZES:-"4096 65536 1048576 16777216"}
BOTO3_OPS_DIV=${BOTO3_OPS_DIV:-8}
CLIENTS=${CLIENTS:-"hipobj aws-sdk-s3 object_store boto3"}
OBJECT_MIB=${OBJECT_MIB:-256}
SEED=${SEED:-42}
SKIP_BUILD=${SKIP_BUILD:-0}
HIPOBJ=${HIPOBJ:-$REPO/target/release/hipobj}
HIPOBJ_CLIENT=${HIPOBJ_CLIENT:-$HIPOBJ}   # the hipobj rows' binary (the server is always $HIPOBJ)
OUT_DIR=${OUT_DIR:-$REPO/benches/results/$(date +%Y-%m-%d_%H%M%S)}
PEERS=$REPO/benches/peers
PEER_BIN=${PEER_BIN:-$PEERS/target/release}
SHIM=${SHIM:-$REPO/benches/nodelay_shim/libnodelay.so}
SERVER=${SERVER:-s3s-fs}
SERVE_FABRIC=${SERVE_FABRIC:-soft}
read -r -a BENCH_EXTRA <<< "${HIPOBJ_BENCH_FLAGS:-}"
# taskset prefixes (empty when no core list is given)
SERVER_PIN=() CLIENT_PIN=()
[[ -n ${SERVER_CPUS:-} ]] && SERVER_PIN=(taskset -c "$SERVER_CPUS")
[[ -n ${CLIENT_CPUS:-} ]] && CLIENT_PIN=(taskset -c "$CLIENT_CPUS")
BUCKET=bench
KEY=obj-${OBJECT_MIB}MiB
export AWS_ACCESS_KEY_ID=hipobjbench AWS_SECRET_ACCESS_KEY=hipobjbenchsecret
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true

# Op count per range size: each cell should run a few seconds on a 2-core box
# where s3s-fs tops out near 0.4 GB/s and ~10k small ops/s.
ops_for() {
    local size=$1 var="OPS_$1"
    if [[ -n ${!var:-} ]]; then echo "${!var}"; return; fi
    if [[ $QUICK == 1 ]]; then
        case $size in 4096) echo 4000 ;; 65536) echo 2000 ;; 1048576) echo 300 ;;
            16777216) echo 24 ;; *) echo 200 ;; esac
    else
        case $size in 4096) echo 30000 ;; 65536) echo 15000 ;; 1048576) echo 2000 ;;
            16777216) echo 160 ;; *) echo 2000 ;; esac
    fi
}

log() { printf '%s\n' "$*" >&2; }

# --- tools -------------------------------------------------------------------
if [[ -z ${S3S_FS:-} ]]; then
    for c in "$(command -v s3s-fs || true)" "$HOME/.cargo/bin/s3s-fs" "$REPO/.tools/bin/s3s-fs"; do
        if [[ -n $c && -x $c ]]; then S3S_FS=$c; break; fi
    done
fi
if [[ $SERVER == s3s-fs && -z ${S3S_FS:-} ]]; then
    log "s3s-fs not found (cargo install s3s-fs --version 0.14.1 --features binary)"; exit 1
fi
[[ $SERVER == s3s-fs || $SERVER == hipobj ]] || { log "SERVER must be s3s-fs or hipobj"; exit 1; }

if [[ $SKIP_BUILD != 1 ]]; then
    log "building nodelay shim"
    cc -O2 -Wall -fPIC -shared -o "$SHIM" "$REPO/benches/nodelay_shim/nodelay.c" -ldl
    log "building peers (nice -n 19, -j1; first build takes several minutes)"
    t0=$(date +%s)
    nice -n 19 cargo build --release -j1 --locked --manifest-path "$PEERS/Cargo.toml" >&2
    log "peers built in $(( $(date +%s) - t0 )) s"
fi
[[ -f $SHIM ]] || { log "missing $SHIM (run without SKIP_BUILD=1)"; exit 1; }
if [[ " $CLIENTS " == *" boto3 "* ]] && ! python3 -c 'import boto3' 2>/dev/null; then
    log "boto3 missing: python3 -m pip install boto3"
    python3 -m pip install -q boto3 >&2
fi

HIPOBJ_OK=0 HIPOBJ_FLAGS=()
if [[ -x $HIPOBJ_CLIENT ]] && HIPOBJ_HELP=$("$HIPOBJ_CLIENT" bench --help 2>&1); then
    HIPOBJ_OK=1
    # Optional flags, passed only where this build of `hipobj bench` has them.
    [[ $HIPOBJ_HELP == *--addressing-style* ]] && HIPOBJ_FLAGS+=(--addressing-style path)
    [[ $HIPOBJ_HELP == *--no-progress* ]] && HIPOBJ_FLAGS+=(--no-progress)
    [[ $HIPOBJ_HELP == *--seed* ]] && HIPOBJ_FLAGS+=(--seed "$SEED")
    # The peers compare nothing: since issue 33 `bench` reads the object once and compares
    # every range no server checksum proved, unless told not to.
    [[ $HIPOBJ_HELP == *--no-verify* ]] && HIPOBJ_FLAGS+=(--no-verify)
fi

# --- server --------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hipobj-sbs.XXXXXX")
SPID=
cleanup() {
    if [[ -n $SPID ]]; then kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

mkdir -p "$WORK/root/$BUCKET" "$OUT_DIR"
# Results are per-run scratch; only docs/benchmarks-side-by-side.md is committed.
if [[ -d $REPO/benches/results && ! -f $REPO/benches/results/.gitignore ]]; then
    printf '*\n' > "$REPO/benches/results/.gitignore"
fi
OBJ=$WORK/root/$BUCKET/$KEY
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
EP=http://127.0.0.1:$PORT
wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
        kill -0 "$SPID" 2>/dev/null || { log "$SERVER died:"; cat "$OUT_DIR/server.log" >&2; exit 1; }
        sleep 0.1
    done
    log "$SERVER did not listen on $PORT"; exit 1
}
if [[ $SERVER == s3s-fs ]]; then
    head -c $((OBJECT_MIB << 20)) /dev/urandom > "$OBJ"
    OBJECT_SIZE=$(stat -c %s "$OBJ")
    # s3s-fs 0.14.1 answers every GET with an ETag; for a file placed by hand (no
    # PutObject) it has none stored and re-hashes the WHOLE object with MD5 on
    # every request (256 MiB per 4 KiB range-get: ~30x fewer ops/s, all of it
    # server CPU). Store the ETag in its internal-info sidecar, as PutObject does.
    python3 - "$WORK/root" "$BUCKET" "$KEY" "$(md5sum "$OBJ" | cut -d' ' -f1)" <<'EOF'
import base64, json, sys
root, bucket, key, md5 = sys.argv[1:5]
enc = lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("=")
with open(f"{root}/.bucket-{enc(bucket)}.object-{enc(key)}.internal.json", "w") as f:
    json.dump({"e_tag": md5}, f)
EOF
    NODELAY_SHIM_VERBOSE=1 LD_PRELOAD=$SHIM "${SERVER_PIN[@]}" "$S3S_FS" --host 127.0.0.1 --port "$PORT" \
        --access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY" "$WORK/root" \
        > "$OUT_DIR/server.log" 2>&1 &
    SPID=$!
    wait_port
else
    # Our gateway: the object goes in through PutObject (its directory layout is its own).
    rmdir "$WORK/root/$BUCKET"
    "${SERVER_PIN[@]}" "$HIPOBJ" serve --listen "127.0.0.1:$PORT" --root "$WORK/root" \
        --fabric "$SERVE_FABRIC" > "$OUT_DIR/server.log" 2>&1 &
    SPID=$!
    wait_port
    OBJ=$WORK/object.src
    head -c $((OBJECT_MIB << 20)) /dev/urandom > "$OBJ"
    OBJECT_SIZE=$(stat -c %s "$OBJ")
    "$HIPOBJ" mb --endpoint-url "$EP" "s3://$BUCKET" >&2
    "$HIPOBJ" put --endpoint-url "$EP" --no-progress "$OBJ" "s3://$BUCKET/$KEY" >&2
fi
log "$SERVER pid $SPID at $EP, object $OBJECT_SIZE bytes, results in $OUT_DIR"

server_cpu() { # utime+stime of s3s-fs in seconds
    awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$SPID/stat"
}
load1() { cut -d' ' -f1 /proc/loadavg; }

# --- machine facts ---------------------------------------------------------------
if (( QUIET_MAX_S > 0 )); then
    for _ in $(seq "$QUIET_MAX_S"); do
        awk '{ exit !($1 < 0.5) }' /proc/loadavg && break
        sleep 1
    done
fi
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
# %CPU over each process's lifetime (ps), our own server excluded. `head` closes the pipe
# early, which under pipefail can fail the pipeline (SIGPIPE) and end the script silently.
TOP_BEFORE=$(ps -eo pid=,pcpu=,comm= --sort=-pcpu | awk -v me="$SPID" '$1 != me' | head -4 |
    awk '{ printf "%s%s %s%%", (NR>1?", ":""), $3, $2 }' || true)
lockver() { awk -v n="$1" '$0 == "name = \"" n "\"" { getline; gsub(/[^0-9.]/, ""); print; exit }' "$PEERS/Cargo.lock"; }
VERSIONS="$( ((HIPOBJ_OK)) && "$HIPOBJ_CLIENT" --version 2>/dev/null | head -1 || echo 'hipobj: bench not available'), \
aws-sdk-s3 $(lockver aws-sdk-s3) (aws-config $(lockver aws-config), hyper $(lockver hyper)), \
object_store $(lockver object_store) (reqwest $(lockver reqwest)), \
boto3 $(python3 -c 'import boto3; print(boto3.__version__)' 2>/dev/null || echo '?') \
(Python $(python3 -c 'import platform; print(platform.python_version())')), $(rustc --version 2>/dev/null | cut -d' ' -f1-2 || true)"

if [[ $SERVER == s3s-fs ]]; then
    SERVER_DESC="s3s-fs $("$S3S_FS" --version 2>/dev/null | awk '{ print $2 }') (LD_PRELOAD TCP_NODELAY shim)"
else
    SERVER_DESC="hipobj serve --fabric $SERVE_FABRIC (our gateway, directory mode)"
fi
RAW=$OUT_DIR/raw.jsonl
: > "$RAW"
run_client() { # client size ops run
    local c=$1 size=$2 ops=$3 run=$4 out="$OUT_DIR/out.$1.$2.$4" rc=0 err="" c0 c1 l
    if [[ $c == hipobj* && $HIPOBJ_OK != 1 ]]; then
        python3 "$PEERS/table.py" record "$RAW" "$c" "$size" "$ops" "$CONC" "$run" "" "$(load1)" /dev/null \
            "hipobj bench not available yet"
        return
    fi
    cat "$OBJ" > /dev/null # page the object in before every timed phase
    l=$(load1)
    c0=$(server_cpu)
    local fabric=auto
    case $c in hipobj-*) fabric=${c#hipobj-} ;; esac
    case $c in
        hipobj|hipobj-*) "${CLIENT_PIN[@]}" "$HIPOBJ_CLIENT" bench --fabric "$fabric" "${BENCH_EXTRA[@]}" --endpoint-url "$EP" "s3://$BUCKET/$KEY" --ops "$ops" --size "$size" \
                    --concurrency "$CONC" --json "${HIPOBJ_FLAGS[@]}" > "$out" 2> "$out.err" || rc=$? ;;
        aws-sdk-s3) "${CLIENT_PIN[@]}" "$PEER_BIN/aws_sdk_s3_bench" "$EP" "$BUCKET" "$KEY" "$OBJECT_SIZE" "$ops" "$size" \
                    "$CONC" "$SEED" > "$out" 2> "$out.err" || rc=$? ;;
        object_store) "${CLIENT_PIN[@]}" "$PEER_BIN/object_store_bench" "$EP" "$BUCKET" "$KEY" "$OBJECT_SIZE" "$ops" "$size" \
                    "$CONC" "$SEED" > "$out" 2> "$out.err" || rc=$? ;;
        boto3) "${CLIENT_PIN[@]}" python3 "$PEERS/boto3_bench.py" "$EP" "$BUCKET" "$KEY" "$OBJECT_SIZE" "$ops" "$size" \
                    "$CONC" "$SEED" > "$out" 2> "$out.err" || rc=$? ;;
        *) log "unknown client $c"; return ;;
    esac
    c1=$(server_cpu)
    if (( rc != 0 )); then err="exit $rc: $(tail -c 300 "$out.err" | tr '\n|' '  ')"; fi
    python3 "$PEERS/table.py" record "$RAW" "$c" "$size" "$ops" "$CONC" "$run" \
        "$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" "$l" "$out" ${err:+"$err"}
}

for size in $SIZES; do
    ops=$(ops_for "$size")
    for run in $(seq "$REPEAT"); do
        log "size $size, run $run/$REPEAT"
        order=$CLIENTS # odd runs in the given order, even runs reversed (order bias)
        if (( run % 2 == 0 )); then order=$(printf '%s\n' $CLIENTS | tac | tr '\n' ' '); fi
        for c in $order; do
            n=$ops
            if [[ $c == boto3 ]]; then n=$(( ops / BOTO3_OPS_DIV )); (( n >= CONC * 2 )) || n=$(( CONC * 2 )); fi
            run_client "$c" "$size" "$n" "$run"
        done
    done
done

SHIM_ACTIVE=false
grep -q '^nodelay-shim: TCP_NODELAY set' "$OUT_DIR/server.log" && SHIM_ACTIVE=true
[[ $SHIM_ACTIVE == true || $SERVER == hipobj ]] || log "WARNING: nodelay shim never fired: small-size numbers carry the ~40 ms delayed-ACK stall"

python3 - "$OUT_DIR/machine.json" <<EOF
import json, sys
json.dump({
    "date": "$(date -u +%Y-%m-%dT%H:%MZ)",
    "host": "$(hostname)",
    "nproc": "$(nproc)",
    "cpu_model": "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)",
    "uname": "$(uname -srm)",
    "command": """$CMDLINE""".strip(),
    "server": "$SERVER_DESC",
    "server_cpus": "${SERVER_CPUS:-any}",
    "client_cpus": "${CLIENT_CPUS:-any}",
    "nodelay_shim_active": "$SHIM_ACTIVE",
    "object_size": $OBJECT_SIZE,
    "concurrency": $CONC,
    "repeat": $REPEAT,
    "versions": """$VERSIONS""",
    "load_before": "$LOAD_BEFORE",
    "load_after": "$(cut -d' ' -f1-3 /proc/loadavg)",
    "top_before": """$TOP_BEFORE""",
}, open(sys.argv[1], "w"), indent=1)
EOF
python3 "$PEERS/table.py" render "$RAW" "$OUT_DIR/machine.json" > "$OUT_DIR/table.md"
cat "$OUT_DIR/table.md"
log "raw JSON lines: $RAW; table: $OUT_DIR/table.md"
