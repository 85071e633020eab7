#!/usr/bin/env bash
# Smoke-runs every fuzz target briefly.
#
#   fuzz/smoke.sh [SECONDS_PER_TARGET] [TARGET...]      (default 10 s, all targets)
#
# Mode is picked automatically (override with FUZZ_MODE=libfuzzer|replay):
# - libfuzzer: `cargo fuzz run` with coverage instrumentation + ASan. Needs cargo-fuzz; runs on the
#   stable toolchain with RUSTC_BOOTSTRAP=1 (FUZZ_NIGHTLY=1 uses `cargo +nightly fuzz` instead).
#   Each target starts from its committed seeds (seeds/<t>) plus a scratch corpus (corpus/<t>,
#   git-ignored) and stops after SECONDS.
# - replay: stable `cargo build` of the targets (no instrumentation), then every binary replays
#   its seeds and runs a bounded number of uninstrumented random inputs. Weaker, but needs
#   nothing beyond stable Rust.
# Exits non-zero on the first target that finds a crash or a failed assertion.
set -euo pipefail
cd "$(dirname "$0")"

secs="${1:-10}"
shift || true
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi

mode="${FUZZ_MODE:-}"
fuzz_cmd=()
if [ -z "$mode" ] || [ "$mode" = libfuzzer ]; then
    if cargo fuzz --version >/dev/null 2>&1; then
        if [ "${FUZZ_NIGHTLY:-0}" = 1 ]; then
            fuzz_cmd=(cargo +nightly fuzz)
        else
            # The pinned stable toolchain with its unstable flags unlocked: cargo-fuzz passes
            # -Zsanitizer and -Cpasses=sancov-module, which stable accepts under RUSTC_BOOTSTRAP.
            fuzz_cmd=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
        fi
        mode=libfuzzer
    elif [ "$mode" = libfuzzer ]; then
        echo "cargo-fuzz is not installed (cargo install cargo-fuzz --locked)" >&2
        exit 2
    else
        mode=replay
    fi
fi

failed=0
if [ "$mode" = libfuzzer ]; then
    for t in "${targets[@]}"; do
        mkdir -p "corpus/$t"
        seeds=()
        [ -d "seeds/$t" ] && seeds=("seeds/$t")
        echo "== $t (${secs}s, libFuzzer)"
        mkdir -p artifacts
        log="artifacts/$t.smoke.log"
        # cargo-fuzz runs from the directory above fuzz/.
        if (cd .. && "${fuzz_cmd[@]}" run "$t" "fuzz/corpus/$t" "${seeds[@]/#/fuzz/}" -- \
                -max_total_time="$secs" -max_len=4096 -print_final_stats=1) >"$log" 2>&1; then
            grep -E "^Done|average_exec_per_sec" "$log" || true
        else
            echo "!! $t failed (full log: fuzz/$log, input: fuzz/artifacts/$t/)" >&2
            grep -E -A8 "panicked at|ERROR: AddressSanitizer|ERROR: libFuzzer|^error" "$log" | head -n 30 >&2 || true
            failed=1
        fi
    done
else
    cargo build --quiet
    for t in "${targets[@]}"; do
        exe="target/debug/$t"
        echo "== $t (replay seeds + uninstrumented random inputs)"
        if [ -d "seeds/$t" ] && ls "seeds/$t"/* >/dev/null 2>&1; then
            "$exe" seeds/"$t"/* >/dev/null 2>&1 || { echo "!! $t failed on its seeds" >&2; failed=1; continue; }
        fi
        mkdir -p "artifacts/$t"
        "$exe" -max_total_time="$secs" -runs=200000 -max_len=4096 -artifact_prefix="artifacts/$t/" \
            >"artifacts/$t.smoke.log" 2>&1 \
            || { echo "!! $t failed on random input (see fuzz/artifacts/$t/)" >&2; failed=1; }
    done
fi
exit "$failed"
