#!/usr/bin/env bash
# Issue 4's proof on a GPU machine, in one go: devices, compare (OpenCL against CUDA on the
# same GPU, interleaved), bench (both APIs, with the plot), demo, doctor, and the CUDA tests.
#   scripts/gpu-compare.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR: scripts/build-gpu-bundle.sh's output. ONLY="bench tests" runs just those steps
# (devices compare compare-register bench demo tests doctor). Never changes the GPU's settings.
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
SIZE=${PINSTREAM_COMPARE_SIZE:-10GiB}
mkdir -p "$OUT_DIR"
P=$BIN_DIR/pinstream
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT_DIR/run.log"; }
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
step() { # step NAME CMD...: stdout+stderr to NAME.txt, exit status appended
  local name=$1; shift
  want "${name%%-*}" || want "$name" || return 0
  log "$name: $*"
  "$@" > "$OUT_DIR/$name.txt" 2>&1; echo "rc=$?" >> "$OUT_DIR/$name.txt"
  tail -n 40 "$OUT_DIR/$name.txt"
}
register_nvidia_icd
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv; nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo; } > "$OUT_DIR/machine.txt" 2>&1
log "warming the VM's memory (40 GiB once)"
warm_vm_memory 40 15
step devices "$P" devices
want devices && "$P" devices --json > "$OUT_DIR/devices.json" 2>/dev/null
step compare "$P" compare --size "$SIZE" --vram-budget 4GiB --sizes 1MiB,16MiB,256MiB --repeat 5 --save "$OUT_DIR/compare.json"
step compare-register "$P" compare --size "$SIZE" --vram-budget 4GiB --sizes 256MiB --repeat 5 --cuda-memory register --save "$OUT_DIR/compare-register.json"
step bench "$P" bench --api both --sizes 4KiB..1GiB --repeat 5 --save "$OUT_DIR/bench.json" --plot "$OUT_DIR/bench.svg"
step demo "$P" demo --vram-budget 4GiB --save "$OUT_DIR/demo.json"
# Every test executable on the GPU as default device; the CUDA tests with their ignored ones.
if want tests; then
  for t in "$BIN_DIR"/test-*; do
    extra=(); [ "$(basename "$t")" = test-cuda ] && extra=(--include-ignored)
    ONLY= step "tests-$(basename "$t")" env CARGO_BIN_EXE_pinstream="$P" "$t" --test-threads=1 "${extra[@]}"
  done
  grep -h "^test result" "$OUT_DIR"/tests-*.txt | tee -a "$OUT_DIR/run.log"
fi
step doctor "$P" doctor --size "$SIZE" --block 256MiB --repeat 5 --save "$OUT_DIR/doctor.json"
log "done"
