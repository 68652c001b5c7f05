#!/usr/bin/env bash
# The Python package's tests: installs pinstream into a virtual environment with PyOpenCL,
# NumPy and pytest from PyPI, and runs pytest on the default OpenCL platform (PoCL in CI).
# Exits non-zero on any failure, and when pytest collected no test (its exit code 5).
#   scripts/test-python.sh [--dist FILE] [PYTEST_ARGS...]
# Without --dist: builds the wheel with maturin (debug) into a temporary folder and installs it
# into target/python-venv (reused between runs).
# --dist FILE: a wheel or an sdist (scripts/build-dist.sh), installed as users install it into
# a fresh virtual environment. pip builds an sdist with maturin; here in the workspace's
# target/ with the dev profile (CARGO_TARGET_DIR, MATURIN_PEP517_ARGS), so it recompiles only
# the pinstream crates.
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
PIP=(-m pip install -q --disable-pip-version-check)

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "pinstream needs CPython 3.11 or later (its wheel uses the 3.11 stable ABI): set PYTHON")'
if [ -n "$DIST" ]; then
  VENV=$TMP/venv
  "$PYTHON" -m venv "$VENV"
  grep -v '^maturin' crates/pinstream-py/requirements-test.txt > "$TMP/requirements.txt"
  "$VENV/bin/python" "${PIP[@]}" -r "$TMP/requirements.txt"
  CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target} MATURIN_PEP517_ARGS="--profile dev" \
    "$VENV/bin/python" "${PIP[@]}" "$DIST"
else
  VENV=target/python-venv
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" "${PIP[@]}" -r crates/pinstream-py/requirements-test.txt
  "$VENV/bin/maturin" build --quiet -m crates/pinstream-py/Cargo.toml -o "$TMP"
  "$VENV/bin/python" "${PIP[@]}" --force-reinstall --no-deps "$TMP"/pinstream-*.whl
fi
# The package's own requirements are met by what is installed.
"$VENV/bin/python" -m pip check -q >/dev/null || "$VENV/bin/python" -m pip check

set +e
PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider crates/pinstream-py/tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test-python.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
