#!/usr/bin/env bash
# The project's test command (README): every crate's unit, property and integration tests,
# against real servers started on 127.0.0.1 by the tests themselves.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo test --workspace --locked "$@"
# The fuzz workspace: every target builds on stable and replays its seed corpus.
cargo test --manifest-path fuzz/Cargo.toml --locked
