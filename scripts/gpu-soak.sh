#!/usr/bin/env bash
# 200 cycles of pin 1 GiB, stream it, release, on the GPU machine, with NVML-read device
# memory after each cycle compared with the baseline. Also runs the concurrency and soak tests.
#   scripts/gpu-soak.sh [BIN_DIR] [OUT_DIR]
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
mkdir -p "$OUT_DIR"
register_nvidia_icd
"$BIN_DIR/pinstream" soak --cycles 200 --size 1GiB --block 64MiB --vram-budget 512MiB \
  --max-vram-drift 16MiB --save "$OUT_DIR/gpu-soak.json" > "$OUT_DIR/gpu-soak.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/gpu-soak.txt"
cat "$OUT_DIR/gpu-soak.txt"
for t in concurrency soak; do
  CARGO_BIN_EXE_pinstream="$BIN_DIR/pinstream" "$BIN_DIR/test-$t" --test-threads=1 > "$OUT_DIR/test-$t.txt" 2>&1
  echo "test-$t rc=$? $(grep -E '^test result' "$OUT_DIR/test-$t.txt")" | tee -a "$OUT_DIR/gpu-soak.txt"
done
