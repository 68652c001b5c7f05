#!/usr/bin/env bash
# The Python package's tests: builds the pinstream wheel with maturin into a temporary folder,
# installs it into a virtual environment (target/python-venv, reused between runs) with
# PyOpenCL, NumPy and pytest from PyPI, and runs pytest on the default OpenCL platform (PoCL
# in CI). Exits non-zero on any failure, and when pytest collected no test (its exit code 5).
#   scripts/test-python.sh [PYTEST_ARGS...]
# PYTHON picks the interpreter (CPython 3.11 or later; default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=target/python-venv
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "pinstream needs CPython 3.11 or later (its wheel uses the 3.11 stable ABI): set PYTHON")'
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r crates/pinstream-py/requirements-test.txt

"$VENV/bin/maturin" build --quiet -m crates/pinstream-py/Cargo.toml -o "$WHEELS"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$WHEELS"/pinstream-*.whl
# The wheel's own requirements are met by what is installed.
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
