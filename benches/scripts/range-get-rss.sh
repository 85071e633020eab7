#!/usr/bin/env bash
# 1,000,000 range-gets of 4 KiB per fabric (HTTP, then soft rc-persistent) through the
# engine's rings against `hipobj serve` on loopback, asserting the RSS bound documented in
# cli/tests/range_get_rss.rs; prints the measured `RSS ...` lines. Minutes on a small machine
# (debug build: about 1,000-10,000 ops/s depending on load), so it is an #[ignore]d test that
# this script runs. Extra arguments go to cargo (e.g. --release).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo test -p hipobj-cli --test range_get_rss "$@" -- --ignored --nocapture range_gets_1m_bounded_rss 2>&1 \
    | grep --line-buffered -E '^RSS |test result|panicked|FAILED'
