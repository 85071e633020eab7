#!/usr/bin/env bash
# The project's test command (README): every crate's unit, property and integration tests,
# against real servers started on 127.0.0.1 by the tests themselves. Tests that need hardware
# this machine may lack (GPU, RDMA NIC, the HIP runtime) are #[ignore]d; the last line says how
# many did not run here and why. HIPOBJ_REQUIRE_HIP=1 (set by .ci/run) also runs the HIP loader
# test, which then fails when libamdhip64 is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The S3 server the tests start (s3s-fs); installed into .tools/ once when missing.
./benches/scripts/install-s3s-fs.sh
export PATH="$PWD/.tools/bin:$HOME/.cargo/bin:$PATH"
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
cargo test --workspace --locked "$@" 2>&1 | tee "$LOG"
# The engine's `tokio` feature is off by default and no workspace member turns it on, so the
# line above skips its targets (required-features): AsyncQueue's tests and the examples on it.
echo "== engine, feature tokio"
cargo test -p engine --locked --features tokio --test async_queue --test windowed_batch --examples 2>&1 | tee -a "$LOG"
if [ "${HIPOBJ_REQUIRE_HIP:-}" = 1 ]; then
    echo "== HIP loader test (HIPOBJ_REQUIRE_HIP=1)"
    cargo test -p engine --locked --test gpu_hip_runtime -- --ignored 2>&1 | tee -a "$LOG"
fi
# The fuzz workspace: every target builds on stable and replays its seed corpus.
cargo test --manifest-path fuzz/Cargo.toml --locked
# The Python package (python/): wheel built in the dev profile, pytest against our gateway and
# s3s-fs. What cannot run here (no maturin/pytest/numpy, no torch) is counted below.
echo "== Python package tests"
./benches/scripts/python-tests.sh 2>&1 | tee -a "$LOG"
# One line: the ignored tests that no later run in this script ran, grouped by their reason.
python3 - "$LOG" <<'PY'
import re, sys, collections
ignored, ran = {}, set()
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"test (\S+) \.\.\. ignored(?:, (.*))?$", line.rstrip())
    if m:
        ignored[m.group(1)] = m.group(2) or "no reason given"
    m = re.match(r"test (\S+) \.\.\. ok$", line.rstrip())
    if m:
        ran.add(m.group(1))
    # pytest -rs: "SKIPPED [2] python/tests/x.py:150: could not import 'torch'"
    m = re.match(r"SKIPPED \[(\d+)\] (\S+?):\d+: (.*)$", line.rstrip())
    if m:
        for i in range(int(m.group(1))):
            ignored["%s#%d" % (m.group(2) + m.group(3), i)] = "python: " + m.group(3)
    m = re.match(r"python tests: SKIPPED, not run: (.*)$", line.rstrip())
    if m:
        ignored["python tests"] = "python package tests: " + m.group(1)
left = collections.Counter(r for t, r in ignored.items() if t not in ran)
print("did not run here: %d test(s)%s" % (sum(left.values()),
      "".join("; %d %s" % (n, r) for r, n in left.most_common()) if left else ""))
PY
