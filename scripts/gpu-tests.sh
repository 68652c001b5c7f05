#!/usr/bin/env bash
# Runs every carried test executable on the GPU machine's NVIDIA device, one line of results
# per executable: the integration tests (test-*) and each crate's unit tests (unit-*), the
# CUDA tests with --include-ignored (user kernels through NVRTC, the generic engine on CUDA,
# compare). GPU_TESTS="cuda stream unit-lib-pinstream" runs a subset (integration tests
# without the test- prefix, unit tests by their unit- name). One
# executable and one test at a time: NVML's device-memory counter is global, so tests that
# check a VRAM cost or a drift would see each other's memory (a first run with four at once
# read 1 GiB of VRAM for a registration and a 36.6 GiB soak drift).
# A test whose precondition this machine lacks (PoCL alone, a loader that honours
# OPENCL_LAYERS) reports itself skipped (tests/common/mod.rs `skip`) into
# OUT_DIR/NAME.skipped (PINSTREAM_TEST_SKIPS); each line of the summary counts them, and the
# reasons are listed at the end. Source checks (SOURCE_CHECKS) are not device tests: they are
# named as skipped, with the reason, and not run.
#   scripts/build-gpu-bundle.sh gpu-bundle     # here
#   scripts/gpu-tests.sh gpu-bundle [OUT_DIR]  # there
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BIN_DIR=$(readlink -f "${1:-gpu-bundle}")
OUT_DIR=$(mkdir -p "${2:-${OUT:-out}}" && readlink -f "${2:-${OUT:-out}}")
register_nvidia_icd
# The --api vulkan tests (test-vulkan) run through NVIDIA's Vulkan driver.
use_nvidia_vulkan "$BIN_DIR" "$OUT_DIR"
# Tests that build C programs name their sources by the absolute path of the tree they were
# built in: that path is linked to this copy of the tree.
if [ -s "$BIN_DIR/BUILD_ROOT" ]; then
  root=$(cat "$BIN_DIR/BUILD_ROOT")
  if [ "$root" != "$PWD" ] && [ ! -e "$root" ]; then
    mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"
  fi
fi
if [ -n "${GPU_TESTS:-}" ]; then
  names=$(for n in $GPU_TESTS; do case $n in unit-*) echo "$n" ;; *) echo "test-$n" ;; esac; done)
else
  names=$(cd "$BIN_DIR" && ls test-* unit-* 2>/dev/null)
fi
# Executables that check the source tree rather than the device, with the reason.
SOURCE_CHECKS="test-header"
source_check_reason() {
  case $1 in
    test-header) echo "a source check (cbindgen reads the crate through cargo metadata; no Rust toolchain here), not a device test: CI runs it" ;;
  esac
}
one() {
  local name=$1 t=$BIN_DIR/$1 extra=()
  case " $SOURCE_CHECKS " in
    *" $name "*) echo "$name skipped: $(source_check_reason "$name")"; return ;;
  esac
  [ -x "$t" ] || { echo "$name: not in the bundle (FAILED)"; return; }
  [ "$name" = test-cuda ] && extra=(--include-ignored)
  local start=$SECONDS skips=$OUT_DIR/$name.skipped
  rm -f "$skips"
  # PINSTREAM_TEST_DEVICE_NAME: the C suite's programs must say they ran on NVIDIA's device (they
  # take the first GPU; PoCL is the loader's first platform here).
  PINSTREAM_TEST_DEVICE_NAME=NVIDIA PINSTREAM_TEST_SKIPS=$skips CARGO_BIN_EXE_pinstream=$BIN_DIR/pinstream \
    timeout 300 "$t" --test-threads=1 "${extra[@]}" > "$OUT_DIR/$name.txt" 2>&1
  local rc=$? skipped=0
  [ -s "$skips" ] && skipped=$(wc -l < "$skips")
  echo "$name rc=$rc $((SECONDS - start))s $(grep -E '^test result' "$OUT_DIR/$name.txt" | tail -1) $skipped skipped"
}
: > "$OUT_DIR/tests.log"
for name in $names; do one "$name"; done | tee -a "$OUT_DIR/tests.log"
echo "--- failed or ignored tests"
grep -hE "^test .*(FAILED|ignored)" "$OUT_DIR"/test-*.txt "$OUT_DIR"/unit-*.txt 2>/dev/null | head -60
echo "--- skipped tests (the test passed nothing: its precondition is missing here)"
cat "$OUT_DIR"/*.skipped 2>/dev/null
# Every executable run passed: rc=0 on every line but the source checks'.
! grep -v -e " rc=0 " -e "^test-[a-z_]* skipped: " "$OUT_DIR/tests.log" | grep -q .
