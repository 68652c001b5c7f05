#!/usr/bin/env bash
# Runs every carried test executable on the GPU machine's NVIDIA device, one line of results
# per executable: the integration tests (test-*) and each crate's unit tests (unit-*), the
# CUDA tests with --include-ignored (user kernels through NVRTC, the generic engine on CUDA,
# compare). GPU_TESTS="cuda stream" runs a subset (names without the test- prefix). One
# executable and one test at a time: NVML's device-memory counter is global, so tests that
# check a VRAM cost or a drift would see each other's memory (a first run with four at once
# read 1 GiB of VRAM for a registration and a 36.6 GiB soak drift).
#   scripts/build-gpu-bundle.sh gpu-bundle     # here
#   scripts/gpu-tests.sh gpu-bundle [OUT_DIR]  # there
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BIN_DIR=$(readlink -f "${1:-gpu-bundle}")
OUT_DIR=$(mkdir -p "${2:-${OUT:-out}}" && readlink -f "${2:-${OUT:-out}}")
register_nvidia_icd
# Tests that build C programs name their sources by the absolute path of the tree they were
# built in: that path is linked to this copy of the tree.
if [ -s "$BIN_DIR/BUILD_ROOT" ]; then
  root=$(cat "$BIN_DIR/BUILD_ROOT")
  if [ "$root" != "$PWD" ] && [ ! -e "$root" ]; then
    mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"
  fi
fi
if [ -n "${GPU_TESTS:-}" ]; then
  names=$(for n in $GPU_TESTS; do echo "test-$n"; done)
else
  names=$(cd "$BIN_DIR" && ls test-* unit-* 2>/dev/null)
fi
one() {
  local name=$1 t=$BIN_DIR/$1 extra=()
  [ -x "$t" ] || { echo "$name: not in the bundle (FAILED)"; return; }
  [ "$name" = test-cuda ] && extra=(--include-ignored)
  local start=$SECONDS
  CARGO_BIN_EXE_pinstream=$BIN_DIR/pinstream timeout 300 "$t" --test-threads=1 "${extra[@]}" \
    > "$OUT_DIR/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - start))s $(grep -E '^test result' "$OUT_DIR/$name.txt" | tail -1)"
}
: > "$OUT_DIR/tests.log"
for name in $names; do one "$name"; done | tee -a "$OUT_DIR/tests.log"
echo "--- failed or ignored tests"
grep -hE "^test .*(FAILED|ignored)" "$OUT_DIR"/test-*.txt "$OUT_DIR"/unit-*.txt 2>/dev/null | head -60
# Every executable passed: rc=0 on every line.
! grep -v " rc=0 " "$OUT_DIR/tests.log" | grep -q .
