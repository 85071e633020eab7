#!/usr/bin/env bash
# Builds what benches/gpu/side_by_side_on_device.sh runs on the GPU machine (which has no Rust
# toolchain) and copies it, stripped, to .sbs-bin/ (ignored by git; carried by the device tool):
# hipobj (release), the peer benchmarks (benches/peers, own workspace) and the TCP_NODELAY shim.
# The first peers build compiles the AWS SDK and object_store trees (~20 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p hipobj-cli
nice -n 19 cargo build --release -j1 --locked --manifest-path benches/peers/Cargo.toml
mkdir -p .sbs-bin
cc -O2 -Wall -fPIC -shared -o .sbs-bin/libnodelay.so benches/nodelay_shim/nodelay.c -ldl
cp target/release/hipobj benches/peers/target/release/aws_sdk_s3_bench \
   benches/peers/target/release/object_store_bench .sbs-bin/
strip .sbs-bin/hipobj .sbs-bin/aws_sdk_s3_bench .sbs-bin/object_store_bench
grep -qx '/.sbs-bin/' .git/info/exclude 2>/dev/null || echo '/.sbs-bin/' >> .git/info/exclude
ls -la .sbs-bin
