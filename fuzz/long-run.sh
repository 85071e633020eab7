#!/usr/bin/env bash
# Long fuzzing run: every target at once, one libFuzzer process per target, for N minutes,
# starting from the committed seeds; then a per-target table of executions and findings.
#
#   fuzz/long-run.sh run MINUTES [TARGET...]     run (default: every target), then summarize
#   fuzz/long-run.sh summary                     (re)print the table from the logs so far
#
# Environment:
#   FUZZ_BINS  directory holding the instrumented target binaries (default: build them with
#              `cargo fuzz build` here, see fuzz/pack.sh); binaries from fuzz/pack.sh's archive
#              run on a machine without Rust.
#   FUZZ_SEEDS directory of seed corpora, one folder per target (default: fuzz/seeds).
#   FUZZ_WORK  where corpora, logs, crash files and summary.tsv go (default: fuzz/long-run).
#   FUZZ_RSS_MB libFuzzer -rss_limit_mb (default 4096); FUZZ_TIMEOUT_S per-input -timeout (30).
#
# One process per target (no -jobs): on a 16-core machine 18 targets share the cores, so each
# gets about 16/18 of a core; pick MINUTES so every target still gets the CPU time you want
# (the table reports each target's CPU seconds). The run needs no network and no Rust when
# FUZZ_BINS is set. Exit status: 0 when every target ran its time with no finding.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

bins="${FUZZ_BINS:-}"
seeds="${FUZZ_SEEDS:-$here/seeds}"
work="${FUZZ_WORK:-$here/long-run}"
rss="${FUZZ_RSS_MB:-4096}"
per_input="${FUZZ_TIMEOUT_S:-30}"

all_targets() {
    if [ -n "$bins" ]; then
        for f in "$bins"/*; do [ -x "$f" ] && [ -f "$f" ] && basename "$f"; done
    else
        for f in "$here"/fuzz_targets/*.rs; do basename "$f" .rs; done
    fi
}

# Final libFuzzer stat `name` of a log, or the last progress line's count for executions.
stat_of() {
    grep -a "^stat::$2:" "$1" 2>/dev/null | tail -n1 | awk '{print $2}'
}

summary() {
    local table="$work/summary.tsv" t log execs eps cpu crashes status secs
    printf 'target\twall_s\tcpu_s\texecutions\texec_per_s\tnew_units\tpeak_rss_mb\tfindings\tstatus\n' >"$table"
    for log in "$work"/logs/*.log; do
        [ -e "$log" ] || continue
        t="$(basename "$log" .log)"
        execs="$(stat_of "$log" number_of_executed_units)"
        status=done
        if [ -z "$execs" ]; then
            # Still running (or killed): the last progress line `#N ...` is a lower bound.
            execs="$(grep -aoE '^#[0-9]+' "$log" | tail -n1 | tr -d '#')"
            status=running
        fi
        eps="$(stat_of "$log" average_exec_per_sec)"
        secs="$(cat "$work/wall/$t" 2>/dev/null || echo -)"
        # `times` output of the subshell that ran the fuzzer: line 2 is its children's user/sys.
        cpu="$(sed -n 2p "$work/cpu/$t" 2>/dev/null | awk '{
            n = split($1, u, /[ms]/); m = split($2, s, /[ms]/);
            printf "%.0f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')"
        crashes="$(find "$work/artifacts/$t" -type f 2>/dev/null | wc -l)"
        if [ -f "$work/rc/$t" ]; then
            rc="$(cat "$work/rc/$t")"
            [ "$rc" = 0 ] || status="exit $rc"
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$secs" "${cpu:--}" "${execs:-0}" \
            "${eps:--}" "$(stat_of "$log" new_units_added)" "$(stat_of "$log" peak_rss_mb)" \
            "$crashes" "$status" >>"$table"
    done
    column -t -s $'\t' "$table" 2>/dev/null || cat "$table"
    awk -F'\t' 'NR > 1 { n++; e += $4; f += $8 } END {
        printf "%d targets, %d executions in all, %d finding file(s)\n", n, e, f }' "$table"
}

run_one() {
    local t="$1" secs="$2" exe="$3" start rc
    mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
    local dirs=("$work/corpus/$t")
    [ -d "$seeds/$t" ] && dirs+=("$seeds/$t")
    start=$(date +%s)
    (
        "$exe" -max_total_time="$secs" -rss_limit_mb="$rss" -timeout="$per_input" -max_len=4096 \
            -print_final_stats=1 -artifact_prefix="$work/artifacts/$t/" "${dirs[@]}" \
            >"$work/logs/$t.log" 2>&1
        rc=$?
        times >"$work/cpu/$t"
        exit "$rc"
    )
    rc=$?
    echo "$rc" >"$work/rc/$t"
    echo $(($(date +%s) - start)) >"$work/wall/$t"
}

cmd="${1:-}"
shift || true
case "$cmd" in
run)
    minutes="${1:?usage: long-run.sh run MINUTES [TARGET...]}"
    shift
    secs=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
    if [ "$#" -gt 0 ]; then targets=("$@"); else mapfile -t targets < <(all_targets); fi
    if [ -z "$bins" ]; then
        (cd "$here/.." && RUSTC_BOOTSTRAP=1 cargo fuzz build) ||
            { echo "cargo fuzz build failed (cargo install cargo-fuzz --locked)" >&2; exit 2; }
        bins="$here/target/x86_64-unknown-linux-gnu/release"
    fi
    rm -rf "$work/logs" "$work/cpu" "$work/rc" "$work/wall" "$work/artifacts"
    mkdir -p "$work/logs" "$work/cpu" "$work/rc" "$work/wall" "$work/artifacts"
    echo "fuzzing ${#targets[@]} targets for ${minutes} min each on $(nproc) cores, from $seeds"
    for t in "${targets[@]}"; do
        [ -x "$bins/$t" ] || { echo "no binary $bins/$t" >&2; exit 2; }
        run_one "$t" "$secs" "$bins/$t" &
    done
    wait
    summary
    awk -F'\t' 'NR > 1 && ($8 > 0 || $9 != "done") { bad = 1 } END { exit bad }' "$work/summary.tsv"
    ;;
summary)
    summary
    ;;
*)
    sed -n '2,20p' "$0" >&2
    exit 2
    ;;
esac
