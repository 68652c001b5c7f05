#!/usr/bin/env bash
# Runs the carried test executables on the GPU machine's NVIDIA device: the CUDA tests with
# --include-ignored (user kernels through NVRTC, the generic engine on CUDA, compare), and the
# library's and the C library's tests, one line of results per executable.
#   scripts/build-gpu-bundle.sh gpu-bundle     # here
#   scripts/gpu-tests.sh gpu-bundle [OUT_DIR]  # there
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BIN_DIR=$(readlink -f "${1:-gpu-bundle}")
OUT_DIR=${2:-${OUT:-out}}
mkdir -p "$OUT_DIR"
register_nvidia_icd
P=$BIN_DIR/pinstream
status=0
for name in ${GPU_TESTS:-cuda stream library adopt devices}; do
  t=$BIN_DIR/test-$name
  [ -x "$t" ] || { echo "test-$name: not in the bundle" | tee -a "$OUT_DIR/tests.log"; continue; }
  extra=(); [ "$name" = cuda ] && extra=(--include-ignored)
  CARGO_BIN_EXE_pinstream=$P timeout 240 "$t" --test-threads=1 "${extra[@]}" > "$OUT_DIR/test-$name.txt" 2>&1
  rc=$?
  [ "$rc" = 0 ] || status=1
  echo "test-$name rc=$rc $(grep -E '^test result' "$OUT_DIR/test-$name.txt" | tail -1)" | tee -a "$OUT_DIR/tests.log"
done
grep -hE "^test .*(FAILED|ignored)" "$OUT_DIR"/test-*.txt | head -40
exit $status
