#!/usr/bin/env bash
# Issue 14's bench on the 16-core GPU machine, in one call: the soft RDMA fabric with 2 devices
# vs 1, same batch. Our gateway (`hipobj serve --fabric soft`) is pinned to SERVER_CPUS, the
# client to CLIENT_CPUS; `hipobj bench --fabric soft --soft-nics N --workers-per-nic W` runs the
# same range-gets (same object, sizes, offsets, concurrency) with N = 1 and N = 2 soft NICs
# (cli/src/soft_nics.rs: a synthesized one-node topology with this host's CPUs; each NIC's
# workers pair their own soft queue pairs; range-gets of at least 8 MiB are striped across the
# NICs in 4 MiB chunks). Reports GB/s per run, bytes per NIC (`Engine::nic_bytes`) and the
# ratio N=2 / N=1 of the median GB/s.
#
# Binaries are built here and carried (the machine has no Rust toolchain):
#   cargo build --release -p hipobj-cli && cp target/release/hipobj .sbs-bin/   # or build_side_by_side.sh
#   run(command="bash benches/gpu/soft_nics_on_device.sh", carry=[".sbs-bin"])  # device tool
#
# Knobs: BIN, HIPOBJ, SERVER_CPUS [8-15], CLIENT_CPUS [0-7], SIZES ["1048576 16777216"],
# CONC [16], WPN (workers per NIC) ["1 2"], REPEAT [3], OPS_<size>, OBJECT_MIB [256].
# Results: $OUT/soft-nics-<stamp>/ (device tool) or benches/results/soft-nics-<stamp>/.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-$PWD/.sbs-bin}
HIPOBJ=${HIPOBJ:-$BIN/hipobj}
[[ -x $HIPOBJ ]] || { echo "missing $HIPOBJ (build hipobj here and carry it)" >&2; exit 1; }
SERVER_CPUS=${SERVER_CPUS:-8-15} CLIENT_CPUS=${CLIENT_CPUS:-0-7}
SIZES=${SIZES:-"1048576 16777216"} CONC=${CONC:-16} WPN=${WPN:-"1 2"} REPEAT=${REPEAT:-3}
OBJECT_MIB=${OBJECT_MIB:-256}
OPS_1048576=${OPS_1048576:-4000} OPS_16777216=${OPS_16777216:-400} OPS_65536=${OPS_65536:-20000}
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
RES=${OUT:-$PWD/benches/results}/soft-nics-$stamp
mkdir -p "$RES"
export AWS_ACCESS_KEY_ID=hipobjbench AWS_SECRET_ACCESS_KEY=hipobjbenchsecret
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hipobj-softnics.XXXXXX")
SPID=
cleanup() {
    if [[ -n $SPID ]]; then kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
EP=http://127.0.0.1:$PORT
taskset -c "$SERVER_CPUS" "$HIPOBJ" serve --listen "127.0.0.1:$PORT" --root "$WORK/root" \
    --fabric soft > "$RES/server.log" 2>&1 &
SPID=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
head -c $((OBJECT_MIB << 20)) /dev/urandom > "$WORK/object.src"
"$HIPOBJ" mb --endpoint-url "$EP" s3://bench >&2
"$HIPOBJ" put --endpoint-url "$EP" --no-progress "$WORK/object.src" s3://bench/obj >&2
rm -f "$WORK/object.src"
{
    nproc; grep -m1 'model name' /proc/cpuinfo; uname -r
    echo "server cores $SERVER_CPUS, client cores $CLIENT_CPUS, concurrency $CONC, object $OBJECT_MIB MiB"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$RES/machine.txt"
rc=0
for size in $SIZES; do
    ops_var=OPS_$size; ops=${!ops_var:-1000}
    for w in $WPN; do
        for r in $(seq "$REPEAT"); do
            # Alternate the order per repeat so drift does not favour one side.
            order="1 2"; (( r % 2 == 0 )) && order="2 1"
            for n in $order; do
                line=$(taskset -c "$CLIENT_CPUS" "$HIPOBJ" bench --fabric soft --soft-nics "$n" \
                    --workers-per-nic "$w" --endpoint-url "$EP" s3://bench/obj --ops "$ops" \
                    --size "$size" --concurrency "$CONC" --json 2>>"$RES/client.err") || rc=1
                echo "{\"size\":$size,\"soft_nics\":$n,\"workers_per_nic\":$w,\"run\":$r,\"load1\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"report\":${line:-null}}" >> "$RES/raw.jsonl"
                echo "size $size W=$w N=$n run $r: $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%.2f GB/s, %d workers, nics %s, paths %s" % (d["gb_per_s"], d["workers"], d["nics"], d["paths"]))' "${line:-null}" 2>/dev/null || echo failed)"
            done
        done
    done
done
python3 - "$RES/raw.jsonl" > "$RES/table.md" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cells = {}
for r in rows:
    if r["report"]:
        cells.setdefault((r["size"], r["workers_per_nic"], r["soft_nics"]), []).append(r["report"])
print("| size | workers per NIC | soft NICs | workers | GB/s (median) | runs | bytes per NIC (median run) | errors |")
print("|---|--:|--:|--:|--:|--:|---|--:|")
for (size, w, n), reps in sorted(cells.items()):
    reps.sort(key=lambda d: d["gb_per_s"])
    mid = reps[len(reps) // 2]
    nics = ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in mid["nics"].items()) if isinstance(mid["nics"], dict) else str(mid["nics"])
    print(f"| {size >> 20} MiB | {w} | {n} | {mid['workers']} | {statistics.median(d['gb_per_s'] for d in reps):.2f} | {len(reps)} | {nics} | {sum(d['errors'] for d in reps)} |")
print()
print("| size | workers per NIC | GB/s 2 NICs ÷ 1 NIC |")
print("|---|--:|--:|")
for (size, w, n), reps in sorted(cells.items()):
    if n == 2 and (size, w, 1) in cells:
        one = statistics.median(d["gb_per_s"] for d in cells[(size, w, 1)])
        two = statistics.median(d["gb_per_s"] for d in reps)
        print(f"| {size >> 20} MiB | {w} | {two / one:.2f}× |")
EOF
cat "$RES/table.md"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RES/machine.txt"
exit $rc
