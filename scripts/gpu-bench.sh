#!/usr/bin/env bash
# `pinstream bench` on the GPU machine: every strategy, 4 KiB to 1 GiB blocks, 5 repeats.
#   scripts/gpu-bench.sh [BIN_DIR] [OUT_DIR]
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
mkdir -p "$OUT_DIR"
register_nvidia_icd
warm_vm_memory 16 5
"$BIN_DIR/pinstream" bench --sizes 4KiB..1GiB --repeat 5 --save "$OUT_DIR/bench.json" --plot "$OUT_DIR/bench.svg" \
  > "$OUT_DIR/bench.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/bench.txt"
grep -E "^[a-z-]+$|peak|rc=" "$OUT_DIR/bench.txt"
