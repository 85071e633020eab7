#!/usr/bin/env bash
# The Python package's tests (python/tests, pytest) against our gateway and s3s-fs.
#
# Builds the wheel with maturin in the dev profile (it reuses the workspace's debug build, so
# it costs one link rather than a release build of the workspace) as a manylinux_2_34 wheel
# (maturin's auditwheel check refuses a wheel that links libraries or glibc symbols outside
# that policy, the same check a `--release` build gets), installs the built wheel with pip into
# a fresh virtual environment, target/python-venv (python3 -m venv; it sees the system's
# pytest and numpy, never writes the system site-packages), checks that `hipobj` is imported
# from that venv, and runs pytest with the venv's python. A second venv without system packages
# gets the wheel alone and builds an engine (the wheel needs nothing else). Needs python3 with maturin, pytest and numpy (.ci/run installs them); without them it
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
rm -rf target/python-wheel target/python-site target/python-venv target/python-venv-bare
python3 -m maturin build --locked --profile dev -m python/Cargo.toml -o target/python-wheel \
    --interpreter python3 --compatibility manylinux_2_34 --quiet
python3 -m venv --system-site-packages target/python-venv
venv_python="$PWD/target/python-venv/bin/python"
"$venv_python" -m pip install --quiet --no-deps --no-index target/python-wheel/hipobj-*-manylinux_2_34_*.whl
# The package under test is the wheel in the venv, not a copy elsewhere on sys.path.
(cd /tmp && "$venv_python" -c 'import hipobj, sys; assert hipobj.__file__.startswith(sys.prefix), hipobj.__file__')
# And the wheel alone is enough: in a venv with nothing else (no numpy), it installs, imports
# and builds an engine.
python3 -m venv target/python-venv-bare
bare_python="$PWD/target/python-venv-bare/bin/python"
"$bare_python" -m pip install --quiet --no-deps --no-index target/python-wheel/hipobj-*-manylinux_2_34_*.whl
(cd /tmp && "$bare_python" -c '
import hipobj
hipobj.Engine(endpoint="http://127.0.0.1:9", access_key="a", secret_key="b", region="us-east-1",
              fabric="http").close()
print("python tests: the wheel installs and runs alone in", hipobj.__file__.rsplit("/hipobj/", 1)[0])')
PYTHONPATH="$PWD/python/tests" HIPOBJ_BIN="$PWD/target/debug/hipobj" \
    "$venv_python" -m pytest -p no:cacheprovider -q -rs python/tests "$@"
