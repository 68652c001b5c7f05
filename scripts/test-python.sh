#!/usr/bin/env bash
# The Python package's tests: installs pinstream into a virtual environment with PyOpenCL,
# NumPy and pytest from PyPI, and runs pytest on the default OpenCL platform (PoCL in CI).
# Exits non-zero on any failure, and when pytest collected no test (its exit code 5).
#   scripts/test-python.sh [--dist FILE] [PYTEST_ARGS...]
# Without --dist: builds the wheel with maturin (debug) into a temporary folder and installs it
# into target/python-venv (reused between runs).
# --dist FILE: a wheel or an sdist (scripts/build-dist.sh), installed as users install it into
# a fresh virtual environment (an sdist: see install_sdist).
# PYTHON picks the interpreter (CPython 3.11 or later; default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
DIST=""
if [ "${1:-}" = "--dist" ]; then
  DIST=$(realpath "${2:?--dist takes a wheel or an sdist (scripts/build-dist.sh)}")
  shift 2
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# The interpreter's own pip installs into the environment (--python): environments made
# without pip of their own are made in a fraction of the time.
pip() { "$PYTHON" -m pip --python "$VENV/bin/python" --disable-pip-version-check "$@"; }

# pip builds the sdist as scripts/build-dist.sh built the wheel, with its pinned maturin and zig
# (target/dist-venv), the dev profile and the workspace's target/: cargo finds the sdist's
# crates unchanged (same relative paths, same files) and rebuilds little. A user's plain
# `pip install` builds in isolation with maturin from PyPI and the host's linker instead.
install_sdist() {
  [ -x target/dist-venv/bin/maturin ] || { echo "test-python.sh: no target/dist-venv: run scripts/build-dist.sh first" >&2; exit 1; }
  pip install -q "$(grep '^maturin==' crates/pinstream-py/requirements-dist.txt)"
  PATH=$ROOT/target/dist-venv/bin:$PATH CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target} \
    MATURIN_PEP517_ARGS="--profile dev --zig --compatibility manylinux_2_28" \
    pip install -q --no-build-isolation --no-cache-dir "$DIST"
}

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "pinstream needs CPython 3.11 or later (its wheel uses the 3.11 stable ABI): set PYTHON")'
if [ -n "$DIST" ]; then
  VENV=$TMP/venv
  "$PYTHON" -m venv --without-pip "$VENV"
  grep -v '^maturin' crates/pinstream-py/requirements-test.txt > "$TMP/requirements.txt"
  pip install -q -r "$TMP/requirements.txt"
  if [[ "$DIST" == *.tar.gz ]]; then install_sdist; else pip install -q "$DIST"; fi
else
  VENV=target/python-venv
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --without-pip "$VENV"
  pip install -q -r crates/pinstream-py/requirements-test.txt
  "$VENV/bin/maturin" build --quiet -m crates/pinstream-py/Cargo.toml -o "$TMP"
  pip install -q --force-reinstall --no-deps "$TMP"/pinstream-*.whl
fi
# The package's own requirements are met by what is installed.
pip check -q >/dev/null || pip check

set +e
PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider crates/pinstream-py/tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test-python.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
