#!/usr/bin/env bash
# Installs s3s-fs 0.14.1, the strict third-party S3 server the tests and demo.sh start on
# 127.0.0.1, into <repo>/.tools/bin unless one is already on PATH, in ~/.cargo/bin or in .tools.
# Needs network access (crates.io) and takes about 3 minutes, once. Newer s3s-fs versions need a
# newer rustc. Used by .ci/run, benches/scripts/test.sh and benches/scripts/demo.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
if command -v s3s-fs >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/s3s-fs" ] || [ -x .tools/bin/s3s-fs ]; then
    exit 0
fi
echo "== installing s3s-fs 0.14.1 into $PWD/.tools (the S3 server the tests start; once, about 3 minutes, needs network)"
cargo install --locked s3s-fs@0.14.1 --features binary --root .tools
