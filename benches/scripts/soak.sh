#!/usr/bin/env bash
# The soak of issue 17 (not in CI): mixed engine ops (RANGE_GET, GET, HEAD, PUT, multipart)
# over HTTP and over the soft fabric against an in-process gateway, with the fault relay
# injecting faults at a low rate (every=M) on the S3 connections and the soft data port.
# Prints ops, errors by class, RSS and open fds every 10 s, then a summary; fails on any false
# success, panic, or RSS/fd growth past the bounds documented in gateway/tests/soak.rs.
# Usage: benches/scripts/soak.sh [SECONDS]   (default 600; runs at nice 10)
set -euo pipefail
cd "$(dirname "$0")/../.."
export SOAK_SECS="${1:-600}"
cargo test -p hipobj-gateway --test soak --no-run 2>/dev/null
echo "soak: ${SOAK_SECS} s; load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
nice -n 10 cargo test -p hipobj-gateway --test soak -- --ignored --nocapture soak_long 2>&1 \
    | grep --line-buffered -E '^soak|test result|panicked|FAILED|false successes'
echo "soak: load after: $(cut -d' ' -f1-3 /proc/loadavg)"
