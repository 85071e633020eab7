#!/usr/bin/env bash
# The issue-13 side-by-side run on the 16-core GPU machine, in one call: our gateway
# (`hipobj serve --fabric soft`) pinned to cores 8-15, every client pinned to cores 0-7,
# concurrency 16, 64 KiB / 1 MiB / 16 MiB range-gets of one 256 MiB object:
# hipobj over HTTP, hipobj over the soft RDMA fabric, object_store, aws-sdk-s3.
#
# That machine has no Rust toolchain and no network, so the binaries are built here and carried:
#
#   benches/gpu/build_side_by_side.sh     # here: hipobj (release), the peers, the shim -> .sbs-bin/
#   run(command="bash benches/gpu/side_by_side_on_device.sh", carry=[".sbs-bin"])   # device tool
#
# If .sbs-bin/hipobj-before exists (an older build, e.g. the last release), a first pass runs its
# hipobj rows alone (same server binary: the current one; with BEFORE_SERVER=1 the older build
# serves its own rows, for a change on both sides of the wire) so one call gives before and after.
#
# Knobs: everything benches/side_by_side.sh takes (SIZES, CONC, REPEAT, CLIENTS, OPS_<size>,
# HIPOBJ_BENCH_FLAGS, SERVER_CPUS, CLIENT_CPUS, ...), and AB_ROUNDS (below). The table lands in $OUT (the device
# tool's return folder) or benches/results/ elsewhere; copy it into docs/benchmarks.md by hand.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-$PWD/.sbs-bin}
[[ -x $BIN/hipobj ]] || { echo "missing $BIN/hipobj: run benches/gpu/build_side_by_side.sh first" >&2; exit 1; }
export SKIP_BUILD=1 HIPOBJ=$BIN/hipobj PEER_BIN=$BIN SHIM=$BIN/libnodelay.so
export SERVER=${SERVER:-hipobj} SERVE_FABRIC=${SERVE_FABRIC:-soft}
export SERVER_CPUS=${SERVER_CPUS:-8-15} CLIENT_CPUS=${CLIENT_CPUS:-0-7}
export CONC=${CONC:-16} SIZES=${SIZES:-"65536 1048576 16777216"}
export CLIENTS=${CLIENTS:-"hipobj-http hipobj-soft object_store aws-sdk-s3"}
export REPEAT=${REPEAT:-3} QUIET_MAX_S=${QUIET_MAX_S:-0}
export OPS_65536=${OPS_65536:-40000} OPS_1048576=${OPS_1048576:-8000} OPS_16777216=${OPS_16777216:-600}
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
results=${OUT:-$PWD/benches/results}
nproc; grep -m1 'model name' /proc/cpuinfo
rc=0
# The server of the rows of client build $1: the current one, or $1 itself with BEFORE_SERVER=1.
server_of() { if [[ ${BEFORE_SERVER:-0} == 1 ]]; then echo "$1"; else echo "$BIN/hipobj"; fi; }
if [[ -x $BIN/hipobj-before ]]; then
    echo "== before: $BIN/hipobj-before (hipobj rows only)"
    OUT_DIR=$results/sbs-before-$stamp CLIENTS="$(printf '%s\n' $CLIENTS | grep '^hipobj' | tr '\n' ' ')" \
        HIPOBJ="$(server_of "$BIN/hipobj-before")" HIPOBJ_CLIENT=$BIN/hipobj-before \
        bash benches/side_by_side.sh || rc=1
fi
echo "== after: $BIN/hipobj and the peers"
OUT_DIR=$results/sbs-$stamp bash benches/side_by_side.sh || rc=1
# AB_ROUNDS=N (with hipobj-before): N more rounds of the hipobj rows alone, before and after
# interleaved, so a client change is judged over several passes of the same machine.
if [[ -x $BIN/hipobj-before ]]; then
    hip_rows="$(printf '%s\n' $CLIENTS | grep '^hipobj' | tr '\n' ' ')"
    for round in $(seq 1 "${AB_ROUNDS:-0}"); do
        for which in hipobj-before hipobj; do
            echo "== A/B round $round: $which"
            OUT_DIR=$results/ab-$which-$round-$stamp CLIENTS="$hip_rows" \
                HIPOBJ="$(server_of "$BIN/$which")" HIPOBJ_CLIENT=$BIN/$which \
                bash benches/side_by_side.sh || rc=1
        done
    done
fi
exit $rc
