#!/usr/bin/env bash
# Builds every fuzz target with cargo-fuzz (libFuzzer + AddressSanitizer, release with debug
# assertions), and packs what a machine without Rust needs to fuzz them for a long time:
#
#   fuzz/pack.sh [DEST]        (default DEST: fuzz/dist)
#
# DEST/fuzz-pack.tar.xz holds bin/<target> (debuginfo stripped, symbols kept, so ASan and
# panic reports still name functions), seeds/<target>/ (the committed seeds) and long-run.sh.
# Every stripped binary first replays its seeds here; a binary that fails is not packed.
# On the other machine:
#   tar -xJf fuzz-pack.tar.xz -C DIR && FUZZ_BINS=DIR/bin FUZZ_SEEDS=DIR/seeds \
#       FUZZ_WORK=DIR/work DIR/long-run.sh run MINUTES
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:-$here/dist}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

(cd "$here/.." && RUSTC_BOOTSTRAP=1 cargo fuzz build)
built="$here/target/x86_64-unknown-linux-gnu/release"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/seeds"
for src in "$here"/fuzz_targets/*.rs; do
    t="$(basename "$src" .rs)"
    objcopy --strip-debug "$built/$t" "$stage/bin/$t"
    if [ -d "$here/seeds/$t" ]; then
        cp -r "$here/seeds/$t" "$stage/seeds/$t"
        # libFuzzer runs each file argument once: the stripped binary must still pass its seeds.
        "$stage/bin/$t" -runs=0 "$here/seeds/$t" >"$stage/replay.log" 2>&1 ||
            { cat "$stage/replay.log" >&2; echo "$t: stripped binary fails on its seeds" >&2; exit 1; }
    fi
done
rm -f "$stage/replay.log"
cp "$here/long-run.sh" "$stage/long-run.sh"
tar -C "$stage" -cf - bin seeds long-run.sh | xz -T0 -6 >"$dest/fuzz-pack.tar.xz"
ls -l "$dest/fuzz-pack.tar.xz"
echo "binaries: $(du -sh "$stage/bin" | cut -f1) stripped, $(du -sh "$built" --exclude=build --exclude=deps --exclude=.fingerprint --exclude=incremental 2>/dev/null | cut -f1) as built"
