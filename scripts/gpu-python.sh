#!/usr/bin/env bash
# Issue 15's benchmark on the GPU machine (Python 3.12 with torch and numpy, no network):
# 10 GiB in and out through a 4 GiB device budget from Python, with pageable NumPy arrays and
# with pinstream arrays (both copied by PyOpenCL on NVIDIA's OpenCL), and with
# torch.empty(..., pin_memory=True) driven by torch. About 2-4 minutes.
#   scripts/gpu-python.sh [WHEEL_DIR] [OUT_DIR]
# WHEEL_DIR (default .whl): scripts/gpu-python-wheels.sh's output, carried to the machine.
# Writes OUT_DIR/{python-bench.json,python-bench.txt,run.log,machine.txt}.
# Never changes the GPU's settings.
set -u
. "$(dirname "$0")/gpu-common.sh"
cd "$(dirname "$0")/.."
WHL=${1:-.whl}; OUT_DIR=${2:-${OUT:-out}}
mkdir -p "$OUT_DIR"
SITE=/tmp/pinstream-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" "$WHL"/*.whl || { echo "could not install the wheels in $WHL"; exit 1; }
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
register_nvidia_icd
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
  nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo
  python3 -m pip list 2>/dev/null | grep -iE '^(torch|numpy|pyopencl|pytools|pinstream|platformdirs|siphash24|typing.extensions) '
  head -n 5 /etc/OpenCL/vendors/*.icd
} > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"
# The VM grows its RAM on first use: the run holds 20 GiB of arrays at a time (torch may round
# its pinned blocks up), so touch 40 GiB first, as scripts/gpu-compare.sh does.
warm_vm_memory 40 10
PYTHONUNBUFFERED=1 timeout 480 python3 crates/pinstream-py/bench/gpu_stream.py \
  --out "$OUT_DIR" --size-gib 10 --budget-gib 4 --block-mib 256 --repeat 5 \
  2>&1 | tee "$OUT_DIR/run.log"
rc=${PIPESTATUS[0]}
echo "rc=$rc" | tee -a "$OUT_DIR/run.log"
exit "$rc"
