#!/usr/bin/env bash
# Issue 34 on the GPU machine, in one call: every test executable (scripts/gpu-tests.sh: the
# psVk refusals and fuzz, the zero-copy batch fuzz, the host-table guard on OpenCL, CUDA and
# Vulkan, the C suite under ASan on NVIDIA's drivers), then the Python package's pytest suite
# on NVIDIA's OpenCL (the wheels of scripts/gpu-python-wheels.sh: the free that never waits,
# exact offsets, refused buffer flags). Results under OUT_DIR: machine.txt, tests/ (one file
# per executable), tests.log, python.txt, and all of it as results.tar.xz (the device tool
# brings back 8 files at most). Never changes the GPU's settings.
#   scripts/gpu-issue34.sh [BIN_DIR] [WHEEL_DIR] [OUT_DIR]
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BIN_DIR=$(readlink -f "${1:-gpu-bundle}"); WHL=${2:-.whl}; OUT_DIR=${3:-${OUT:-out}}
mkdir -p "$OUT_DIR"
register_nvidia_icd
{ date -u; cat "$BIN_DIR/COMMIT"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"

bash scripts/gpu-tests.sh "$BIN_DIR" "$OUT_DIR/tests" > "$OUT_DIR/tests.log" 2>&1
tests_rc=$?
tail -n 80 "$OUT_DIR/tests.log"

SITE=/tmp/pinstream-site
py_rc=1
if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" "$WHL"/*.whl > "$OUT_DIR/python.txt" 2>&1; then
  {
    PYTHONPATH=$SITE python3 -c 'import pyopencl as cl; print([(p.name, [d.name for d in p.get_devices()]) for p in cl.get_platforms()])'
    # The suite's conftest takes the first device: NVIDIA's, the one platform registered here.
    (cd crates/pinstream-py && PYTHONPATH=$SITE timeout 900 python3 -m pytest -q -p no:cacheprovider tests)
  } >> "$OUT_DIR/python.txt" 2>&1
  py_rc=$?
fi
echo "python rc=$py_rc"; tail -n 15 "$OUT_DIR/python.txt"
(cd "$OUT_DIR" && tar -cJf results.tar.xz machine.txt tests.log tests python.txt)
echo "tests rc=$tests_rc python rc=$py_rc"
[ "$tests_rc" = 0 ] && [ "$py_rc" = 0 ]
