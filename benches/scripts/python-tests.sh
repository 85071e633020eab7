#!/usr/bin/env bash
# The Python package's tests (python/tests, pytest) against our gateway and s3s-fs.
#
# Builds the wheel with maturin in the dev profile (it reuses the workspace's debug build, so
# it costs one link rather than a release build of the workspace), installs it into
# target/python-site (no virtualenv, nothing touches the system site-packages) and runs pytest
# there. Needs python3 with maturin, pytest and numpy (.ci/run installs them); without them it
# prints what it skipped and why and exits 0, and test.sh's last line reports it as not run.
# torch and safetensors are optional: their tests are reported skipped by pytest without them.
set -euo pipefail
cd "$(dirname "$0")/../.."
missing=()
for m in maturin pytest numpy; do
    python3 -c "import $m" 2>/dev/null || missing+=("$m")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "python tests: SKIPPED, not run: python3 lacks ${missing[*]} (python3 -m pip install maturin pytest numpy)"
    exit 0
fi
cargo build --locked -p hipobj-cli --bin hipobj
rm -rf target/python-wheel target/python-site
python3 -m maturin build --locked --profile dev -m python/Cargo.toml -o target/python-wheel \
    --interpreter python3 --compatibility linux --quiet
python3 -m pip install --quiet --no-deps --no-index --target target/python-site target/python-wheel/hipobj-*.whl
PYTHONPATH="$PWD/target/python-site:$PWD/python/tests" HIPOBJ_BIN="$PWD/target/debug/hipobj" \
    python3 -m pytest -p no:cacheprovider -q -rs python/tests "$@"
