#!/usr/bin/env bash
# Issue 38's Vulkan ceiling on the GPU machine: bench/ceiling/vk_ceiling.c (plain Vulkan, no
# pinstream: every copy and shader engine alone and every pair of them both ways) beside
# bench/ceiling/cuda_ceiling.cu (CUDA, same sizes), in one run, so only the ratios count.
#   scripts/gpu-vk-ceiling.sh BIN_DIR OUT_DIR
# BIN_DIR: a GPU bundle (scripts/build-gpu-bundle.sh), or any folder with its vulkan/ (Debian's
# libvulkan.so.1: the GPU machine has NVIDIA's driver but no loader) and vulkan-include/ (the
# headers); a bundle's pinstream also measures its own Vulkan copies at the same size
# (ps-vulkan-*.txt), against the ceiling. Writes OUT_DIR/{machine.txt, build.log, *.txt,
# table.md}.
# Never changes the GPU's settings.
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BIN_DIR=$(readlink -f "$1"); OUT_DIR=$2
INC=$BIN_DIR/vulkan-include
mkdir -p "$OUT_DIR" && OUT_DIR=$(readlink -f "$OUT_DIR")
BIN=$(mktemp -d /tmp/vk-ceiling.XXXX)
trap 'rm -rf "$BIN"' EXIT
use_nvidia_vulkan "$BIN_DIR" "$BIN/icd"
{ date -u; cat "$BIN_DIR/COMMIT" 2>/dev/null || git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv; nproc; } > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"
cc -O2 -std=c11 -Wall -I"$INC" bench/ceiling/vk_ceiling.c -ldl -o "$BIN/vk_ceiling" > "$OUT_DIR/build.log" 2>&1 || { cat "$OUT_DIR/build.log"; exit 1; }
nvcc -O2 -o "$BIN/cuda_ceiling" bench/ceiling/cuda_ceiling.cu >> "$OUT_DIR/build.log" 2>&1 || { cat "$OUT_DIR/build.log"; exit 1; }
rc=0
run() { local name=$1; shift; echo "== $name: $*"; "$@" > "$OUT_DIR/$name.txt" 2>&1 || rc=1; grep -E '^(best|check.*WRONG|device)' "$OUT_DIR/$name.txt"; }
# Interleaved, CUDA between the Vulkan runs, so a drift of the host shows.
# Four engines at once (--quad: each direction in halves on two engines), around the best pair
# seen (shader@U0 up, copy@C1 down: 72.7 GB/s on an H100, 2026-12-07), and the copy engines.
QUADS="shader@U0,copy@T0,copy@C1,copy@T1 shader@U0,shader@C0,copy@C1,copy@T1
  shader@U0,copy@T0,copy@C1,shader@U1 shader@U0,shader@U1,copy@C1,copy@C0
  copy@T0,copy@C0,copy@T1,copy@C1 shader@U0,copy@C0,copy@C1,copy@T1
  shader@U0,copy@T0,copy@C1,copy@C2 shader@U0,shader@C2,copy@C1,copy@T1"
quad_args=$(for q in $QUADS; do printf -- '--quad %s ' "$q"; done)
run cuda-1 "$BIN/cuda_ceiling" --size 256 --reps 4 --repeat 5
run vk-groups-512-q4 "$BIN/vk_ceiling" --size 256MiB --reps 4 --repeat 3 --groups 512 --queues 4
# The quads in a run of their own, so a set this device cannot make costs only them.
# shellcheck disable=SC2086
run vk-quads-512 "$BIN/vk_ceiling" --size 256MiB --reps 4 --repeat 3 --groups 512 --queues 4 --quads-only $quad_args
grep '^quad' "$OUT_DIR/vk-quads-512.txt"
# The driver's own host memory instead of an import (gpu-facts: the same speed one way).
run vk-driver-512 "$BIN/vk_ceiling" --size 256MiB --reps 4 --repeat 3 --groups 512 --host driver
run cuda-2 "$BIN/cuda_ceiling" --size 256 --reps 4 --repeat 5
if [ "${VK_CEILING_ALL:-0}" = 1 ]; then
  run vk-two-imports "$BIN/vk_ceiling" --size 256MiB --reps 4 --repeat 3
  run vk-one-import "$BIN/vk_ceiling" --size 256MiB --reps 4 --repeat 3 --one-import
  run vk-groups-8192 "$BIN/vk_ceiling" --size 256MiB --reps 4 --repeat 3 --groups 8192
  # The best pair with one import, as pinstream's `crossed` reads and writes halves of one
  # (it read 66.2 there).
  run vk-one-import-512 "$BIN/vk_ceiling" --size 256MiB --reps 4 --repeat 3 --groups 512 --one-import
  run cuda-3 "$BIN/cuda_ceiling" --size 256 --reps 4 --repeat 5
fi
# pinstream's own Vulkan copies at the same size, where the folder is a GPU bundle: the
# table then gives them against plain Vulkan's best of the same run (issue 38's rule: where the
# driver stops, the goal moves to that ceiling).
if [ -x "$BIN_DIR/pinstream" ]; then
  for k in 1 2; do
    echo "== ps-vulkan-$k: pinstream bench --api vulkan --sizes 256MiB --repeat 5"
    "$BIN_DIR/pinstream" bench --api vulkan --sizes 256MiB --repeat 5 > "$OUT_DIR/ps-vulkan-$k.txt" 2>&1 || rc=1
  done
fi
python3 scripts/vk-ceiling-table.py "$OUT_DIR" | tee "$OUT_DIR/table.md"
exit $rc
