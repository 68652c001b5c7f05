#!/usr/bin/env bash
# Fills .whl/ (git-ignored) for scripts/gpu-python.sh: the pinstream wheel built --release here
# (abi3: CPython 3.11 and later, so also the GPU machine's 3.12), and PyOpenCL with the
# dependencies the GPU machine lacks (it has numpy and typing-extensions), for CPython 3.12
# on manylinux x86-64. Carry `.whl` to the device.
set -euo pipefail
cd "$(dirname "$0")/.."
MATURIN=${MATURIN:-target/python-venv/bin/maturin}
if [ ! -x "$MATURIN" ]; then
  python3 -m venv target/python-venv
  target/python-venv/bin/python -m pip install -q "$(grep ^maturin crates/pinstream-py/requirements-test.txt)"
fi
rm -rf .whl && mkdir .whl
"$MATURIN" build --release --strip -m crates/pinstream-py/Cargo.toml -o .whl
# Exact versions (PyOpenCL 2026.1.4 requires numpy, platformdirs>=2.2, pytools>=2025.1.6 and
# typing_extensions>=4.6; pytools 2026.1.1 requires platformdirs>=2.2, siphash24>=1.6 and
# typing-extensions>=4.5).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  pyopencl==2026.1.4 pytools==2026.1.1 platformdirs==4.14.9 siphash24==1.9
ls -la .whl
