#!/usr/bin/env bash
# The OpenCL layer (libpinstream_layer.so, issue 17) on the GPU machine: classic-recipe programs,
# unmodified, with and without the layer; VRAM, bandwidth and results side by side.
#
#   scripts/build-layer-bundle.sh                 # here, on Debian 12: fills layer-bundle/
#   scripts/gpu-layer.sh [BUNDLE] [OUT_DIR]       # there, from the repository root, as root
#
# 1. crates/pinstream-layer/c/classic_recipe.c: 10 x 1 GiB CL_MEM_ALLOC_HOST_PTR buffers, mapped and
#    filled; WriteBuffer from the mapped pointers, CopyBuffer and a kernel reading each buffer into
#    a device buffer, every byte checked; VRAM (nvidia-smi) before and once all are mapped. Without
#    the layer (the machine's default libOpenCL.so.1, CUDA's), with it through LD_PRELOAD, and
#    through OPENCL_LAYERS with the carried Debian ocl-icd. Then 2 x 256 MiB with COPY_HOST_PTR,
#    without and with the layer: the layer keeps such buffers as asked (0 rewritten, results
#    identical; its copy probe crashed here on 2026-11-30 and was removed).
# 2. clpeak 1.1.2 (Debian 12's package, unmodified) --transfer-bandwidth on the NVIDIA device,
#    without and with the layer (LD_PRELOAD); VRAM sampled while it runs.
# 3. crates/pinstream-layer/py/classic_pyopencl.py on the carried PyOpenCL wheel (mem_flags.
#    ALLOC_HOST_PTR, enqueue_map_buffer, 4 x 512 MiB, and an ALLOC_HOST_PTR|COPY_HOST_PTR buffer):
#    without the layer, through OPENCL_LAYERS (PyOpenCL's bundled ocl-icd honours it) and LD_PRELOAD.
# Results in OUT_DIR: machine.txt, classic.txt, clpeak.txt, pyopencl.txt, table.md (printed last).
# About 4-6 minutes. It never changes the GPU's settings.
#
# Knobs for a dry run elsewhere (e.g. PoCL, no nvidia-smi): LAYER_PLATFORM (NVIDIA), LAYER_COUNT
# (10), LAYER_SIZE_MIB (1024), LAYER_PY_SIZE_MIB (512), LAYER_VRAM_CMD (nvidia-smi ...),
# LAYER_WARM_GIB (24; 0 skips), LAYER_PYTHON (python3), LAYER_EXTRA_ENV (added to every run with
# the layer, e.g. PINSTREAM_LAYER_TEST_FAKE_NV=1 for a dry run on PoCL).
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
B=$(readlink -f "${1:-layer-bundle}")
OUT_DIR=${2:-${OUT:-out}}
mkdir -p "$OUT_DIR"
OUT_DIR=$(readlink -f "$OUT_DIR")
PLATFORM=${LAYER_PLATFORM:-NVIDIA}
COUNT=${LAYER_COUNT:-10}
SIZE_MIB=${LAYER_SIZE_MIB:-1024}
PY_SIZE_MIB=${LAYER_PY_SIZE_MIB:-512}
VRAM=${LAYER_VRAM_CMD:-nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0}
PYTHON=${LAYER_PYTHON:-python3}
read -r -a EXTRA <<< "${LAYER_EXTRA_ENV:-}"
LAYER=$B/libpinstream_layer.so
TMP=$(mktemp -d /tmp/gpu-layer.XXXX)
for f in "$LAYER" "$B/classic_recipe" "$B/ocl-icd/libOpenCL.so.1"; do
  [ -e "$f" ] || { echo "missing $f: build the bundle with scripts/build-layer-bundle.sh and carry it" >&2; exit 2; }
done

register_nvidia_icd
[ "${LAYER_WARM_GIB:-24}" -gt 0 ] && warm_vm_memory "${LAYER_WARM_GIB:-24}" 5

# run NAME FILE LIMIT_S [VAR=VALUE...] -- COMMAND...: appends the run's stdout, then its stderr,
# to FILE under a header; with SAMPLE=1 set in the caller, VRAM is sampled while it runs.
run() {
  local name=$1 file=$2 limit=$3 envs=() sampler=
  shift 3
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "== $name" >&2
  if [ "${SAMPLE:-0}" = 1 ]; then
    ( while :; do $VRAM 2>/dev/null | head -1; sleep 0.2; done ) > "$TMP/vram" &
    sampler=$!
    sleep 0.5
  fi
  local t0; t0=$(date +%s%N)
  env "${envs[@]}" timeout "$limit" "$@" > "$TMP/out" 2> "$TMP/err"
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ -n "$sampler" ]; then sleep 0.5; kill "$sampler"; wait "$sampler" 2>/dev/null; fi
  {
    echo "=== $name"
    echo "rc: $rc"
    echo "wall_s: $((ms / 1000)).$(printf %03d $((ms % 1000)))"
    if [ -n "$sampler" ]; then
      echo "vram_before_mib: $(head -1 "$TMP/vram")"
      echo "vram_peak_mib: $(sort -n "$TMP/vram" | tail -1)"
    fi
    cat "$TMP/out"
    echo "--- stderr"
    cat "$TMP/err"
  } >> "$file"
}

with_layer() { printf '%s\n' PINSTREAM_LAYER_LOG=1 "${EXTRA[@]}"; }
mapfile -t LAYER_ENV < <(with_layer)

{
  date -u
  $VRAM
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
  echo "--- libOpenCL.so.1 in the loader cache (the first is what programs get)"
  ldconfig -p | grep libOpenCL
  echo "--- ICD files"
  grep -H . /etc/OpenCL/vendors/*.icd
  echo "--- pinstream devices (its layer report: which way in works here)"
  [ -x "$B/pinstream" ] && "$B/pinstream" devices
  echo "--- classic_recipe --list, default loader"
  "$B/classic_recipe" --list
  echo "--- classic_recipe --list, Debian ocl-icd"
  LD_LIBRARY_PATH=$B/ocl-icd "$B/classic_recipe" --list
} > "$OUT_DIR/machine.txt" 2>&1

# 1. The classic recipe in C.
C=("$B/classic_recipe" --platform "$PLATFORM" --count "$COUNT" --size-mib "$SIZE_MIB" --repeat 5 --probe "$VRAM")
run "classic: no layer" "$OUT_DIR/classic.txt" 240 -- "${C[@]}"
run "classic: LD_PRELOAD" "$OUT_DIR/classic.txt" 240 LD_PRELOAD="$LAYER" "${LAYER_ENV[@]}" -- "${C[@]}"
run "classic: OPENCL_LAYERS" "$OUT_DIR/classic.txt" 240 LD_LIBRARY_PATH="$B/ocl-icd" OPENCL_LAYERS="$LAYER" "${LAYER_ENV[@]}" -- "${C[@]}"
CP=("$B/classic_recipe" --platform "$PLATFORM" --count 2 --size-mib 256 --repeat 1 --copy-host-ptr --probe "$VRAM")
run "classic --copy-host-ptr: no layer" "$OUT_DIR/classic.txt" 120 -- "${CP[@]}"
run "classic --copy-host-ptr: LD_PRELOAD" "$OUT_DIR/classic.txt" 120 LD_PRELOAD="$LAYER" "${LAYER_ENV[@]}" -- "${CP[@]}"

# 2. clpeak, unmodified, on the device classic_recipe picks (same loader: the default one).
if ls "$B"/clpeak_*.deb >/dev/null 2>&1; then
  dpkg -x "$B"/clpeak_*.deb "$TMP/clpeak"
  read -r P D < <("$B/classic_recipe" --list | grep -m1 "($PLATFORM" | sed -E 's/^platform ([0-9]+) device ([0-9]+):.*/\1 \2/')
  SAMPLE=1 run "clpeak: no layer" "$OUT_DIR/clpeak.txt" 200 -- "$TMP/clpeak/usr/bin/clpeak" -p "${P:-0}" -d "${D:-0}" --transfer-bandwidth
  SAMPLE=1 run "clpeak: LD_PRELOAD" "$OUT_DIR/clpeak.txt" 200 LD_PRELOAD="$LAYER" "${LAYER_ENV[@]}" -- "$TMP/clpeak/usr/bin/clpeak" -p "${P:-0}" -d "${D:-0}" --transfer-bandwidth
else
  echo "no clpeak .deb in $B: clpeak skipped" | tee "$OUT_DIR/clpeak.txt"
fi

# 3. PyOpenCL (the carried wheels, unless this python already has PyOpenCL).
if $PYTHON -c "import pyopencl" 2>/dev/null || { ls "$B"/wheels/pyopencl-*.whl >/dev/null 2>&1 &&
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$TMP/site" "$B"/wheels/*.whl; }; then
  PY=("$PYTHON" crates/pinstream-layer/py/classic_pyopencl.py --platform "$PLATFORM" --count 4 --size-mib "$PY_SIZE_MIB" --probe "$VRAM")
  run "pyopencl: no layer" "$OUT_DIR/pyopencl.txt" 150 PYTHONPATH="$TMP/site" -- "${PY[@]}"
  run "pyopencl: OPENCL_LAYERS" "$OUT_DIR/pyopencl.txt" 150 PYTHONPATH="$TMP/site" OPENCL_LAYERS="$LAYER" "${LAYER_ENV[@]}" -- "${PY[@]}"
  run "pyopencl: LD_PRELOAD" "$OUT_DIR/pyopencl.txt" 150 PYTHONPATH="$TMP/site" LD_PRELOAD="$LAYER" "${LAYER_ENV[@]}" -- "${PY[@]}"
else
  echo "no PyOpenCL wheels in $B (or pip failed): PyOpenCL skipped" | tee "$OUT_DIR/pyopencl.txt"
fi

"$PYTHON" scripts/gpu-layer-table.py "$OUT_DIR" > "$OUT_DIR/table.md"
rm -rf "$TMP"
cat "$OUT_DIR/table.md"
