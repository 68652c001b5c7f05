#!/usr/bin/env bash
# `--api vulkan` on the GPU machine (issue 24): NVIDIA's driver is there but no Vulkan loader,
# and its shipped ICD file names libGLX_nvidia.so.0, which fails headless
# (../shared/docs/gpu-facts.md). This script uses the loader the bundle carries
# (build-gpu-bundle.sh copies Debian's libvulkan.so.1 into BIN_DIR/vulkan) and an ICD file of
# its own naming libEGL_nvidia.so.0 (VK_DRIVER_FILES), then lists the devices, benches every
# Vulkan pinning beside CUDA on the same GPU, and runs the demo (10 GiB through a 4 GiB
# budget), each output committed raw under OUT_DIR.
#   scripts/gpu-vulkan.sh [BIN_DIR] [OUT_DIR]
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=$(readlink -f "${1:-gpu-bundle}"); OUT_DIR=${2:-${OUT:-out}}
mkdir -p "$OUT_DIR"

register_nvidia_icd
use_nvidia_vulkan "$BIN_DIR" "$OUT_DIR"
warm_vm_memory 24 5
run() { # NAME ARGS...: the command's output in OUT_DIR/NAME.txt, its exit code last.
  local name=$1; shift
  "$BIN_DIR/pinstream" "$@" > "$OUT_DIR/$name.txt" 2>&1
  echo "rc=$?" >> "$OUT_DIR/$name.txt"
  tail -n 25 "$OUT_DIR/$name.txt"
}
run vulkan-devices devices --api vulkan
run vulkan-bench bench --api vulkan --sizes 4KiB..1GiB --repeat 5 --save "$OUT_DIR/vulkan-bench.json"
run cuda-bench bench --api cuda --sizes 4KiB..1GiB --repeat 5 --save "$OUT_DIR/cuda-bench.json"
run vulkan-demo demo --api vulkan --size 10GiB --vram-budget 4GiB --save "$OUT_DIR/vulkan-demo.json"
run cuda-demo demo --api cuda --size 10GiB --vram-budget 4GiB --save "$OUT_DIR/cuda-demo.json"
