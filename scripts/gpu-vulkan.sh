#!/usr/bin/env bash
# `--api vulkan` on the GPU machine (issue 24): NVIDIA's driver is there but no Vulkan loader,
# and its shipped ICD file names libGLX_nvidia.so.0, which fails headless
# (../shared/docs/gpu-facts.md). This script uses the loader the bundle carries
# (build-gpu-bundle.sh copies Debian's libvulkan.so.1 into BIN_DIR/vulkan) and an ICD file of
# its own naming libEGL_nvidia.so.0 (VK_DRIVER_FILES), then lists the devices, benches every
# Vulkan pinning beside CUDA on the same GPU, runs the demo (10 GiB through a 4 GiB budget),
# `compare --api vulkan`, doctor's mapped line and the embedding lookup (Vulkan and CUDA), and
# streams 10 GiB registered with psVkHostRegister by a C program on its own VkDevice
# (examples/c/vk_stream.c, 256 MiB blocks: compare with vulkan-bench's 256 MiB row), each
# output committed raw under OUT_DIR. vk_stream is built here with the system C compiler
# against the bundle's libpinstream_capi.so (build-gpu-bundle.sh without NO_TESTS).
# With `ways` (about two minutes), instead: every Vulkan copy way (`--vk-copy`: transfer,
# universal, shader, split, auto, crossed) at 256 MiB blocks beside CUDA's, and the demo once per way, with
# the H2D / D2H / both-ways ratios to CUDA in OUT_DIR/ways-summary.txt.
# With `mapped`: the devices, doctor, the Vulkan embedding lookup, vk_stream and compare only.
# With `inplace` (about three minutes): why the demo's uploads run at 29 GB/s while bench's run
# at 49 (issue 24), each hypothesis a row of `bench --region 10GiB` (64 MiB and 256 MiB blocks:
# block size; the first walk over pages the GPU never copied; one block repeated against a
# walk over 10 GiB; a block across two 4 GiB imports; the demo's per-block waits between
# queues, chained), through CUDA (the reference), Vulkan on 2 MiB pages, Vulkan on 4 KiB pages
# (--vk-huge-pages off) and Vulkan's mixed way (uploads on the copy engine, downloads by the
# shader); then the demo with the mixed way and with 4 KiB pages, and `bench latency` and
# `bench gather` through Vulkan. The rows side by side in OUT_DIR/inplace-summary.txt.
#   scripts/gpu-vulkan.sh [BIN_DIR] [OUT_DIR] [all|ways|mapped|inplace|embed-sweep]
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=$(readlink -f "${1:-gpu-bundle}"); OUT_DIR=${2:-${OUT:-out}}; MODE=${3:-all}
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

# The 256 MiB point of a bench's text report: "H2D D2H both" GB/s.
point() { awk '$1 == "256" && $2 == "MiB" { print $3, $4, $5; exit }' "$1"; }
if [ "$MODE" = ways ]; then
  run cuda-256 bench --api cuda --sizes 256MiB --repeat 5
  read -r ch cd cb < <(point "$OUT_DIR/cuda-256.txt")
  echo "CUDA 256 MiB: H2D $ch D2H $cd both $cb GB/s" > "$OUT_DIR/ways-summary.txt"
  for way in transfer universal shader split auto crossed; do
    run "vulkan-256-$way" bench --api vulkan --vk-copy "$way" --sizes 256MiB --repeat 5
    run "vulkan-demo-$way" demo --api vulkan --vk-copy "$way" --size 10GiB --vram-budget 4GiB
    read -r h d b < <(point "$OUT_DIR/vulkan-256-$way.txt")
    awk -v w="$way" -v h="$h" -v d="$d" -v b="$b" -v ch="$ch" -v cd="$cd" -v cb="$cb" 'BEGIN {
      printf "%-9s H2D %s (%.3f of CUDA)  D2H %s (%.3f)  both %s (%.3f)\n", w, h, h/ch, d, d/cd, b, b/cb }' \
      >> "$OUT_DIR/ways-summary.txt"
    grep -E "^(copies|upload|kernel|download|wall|check)" "$OUT_DIR/vulkan-demo-$way.txt" \
      | sed "s/^/  demo $way: /" >> "$OUT_DIR/ways-summary.txt"
  done
  # Whether the demo's uploads depend on the size pinned (10 GiB imported in 4 GiB chunks)
  # or on the queues: the same demo over 1 GiB with the default way.
  run vulkan-demo-1g demo --api vulkan --size 1GiB --vram-budget 4GiB
  grep -E "^(upload|kernel|wall)" "$OUT_DIR/vulkan-demo-1g.txt" | sed "s/^/  demo 1 GiB: /" \
    >> "$OUT_DIR/ways-summary.txt"
  cat "$OUT_DIR/ways-summary.txt"
  exit 0
fi
# With `embed-sweep` (about a minute): the Vulkan embedding lookup over tables of several sizes,
# so that which bindings read right shows (bindings of at most 1 GiB; above four bindings,
# a second launch): each run's check line in OUT_DIR/embed-sweep.txt.
if [ "$MODE" = embed-sweep ]; then
  for size in 256MiB 1GiB 2GiB 3GiB 8GiB 9GiB; do
    run "vulkan-embedding-$size" demo --api vulkan --workload embedding --size "$size"
    grep -E "^(== embedding|check|error)" "$OUT_DIR/vulkan-embedding-$size.txt" \
      | sed "s/^/$size: /" >> "$OUT_DIR/embed-sweep.txt"
  done
  cat "$OUT_DIR/embed-sweep.txt"
  exit 0
fi
if [ "$MODE" = inplace ]; then
  region() { # NAME ARGS...: bench --region 10GiB through ARGS, its tables into the summary.
    local name=$1; shift
    run "$name" bench --region 10GiB --repeat 3 "$@" > /dev/null
    { echo "== $name: bench --region 10GiB $*"; grep -vE "^rc=0$" "$OUT_DIR/$name.txt"; echo; } \
      >> "$OUT_DIR/inplace-summary.txt"
  }
  : > "$OUT_DIR/inplace-summary.txt"
  region region-cuda --api cuda
  region region-vulkan-huge --api vulkan --vk-huge-pages on
  region region-vulkan-4k --api vulkan --vk-huge-pages off
  region region-vulkan-mixed --api vulkan --vk-copy mixed --sizes 64MiB
  for demo in "mixed --vk-copy mixed" "4k --vk-huge-pages off"; do
    set -- $demo
    run "vulkan-demo-$1" demo --api vulkan "${@:2}" --size 10GiB --vram-budget 4GiB > /dev/null
    grep -E "^(copies|upload|kernel|download|wall|check)" "$OUT_DIR/vulkan-demo-$1.txt" \
      | sed "s/^/demo $1: /" >> "$OUT_DIR/inplace-summary.txt"
  done
  # Small transfers and scattered pieces through Vulkan, beside Vulkan's own calls and CUDA's.
  run vulkan-latency bench latency --api vulkan --save "$OUT_DIR/vulkan-latency.json" > /dev/null
  run vulkan-gather bench gather --api vulkan --save "$OUT_DIR/vulkan-gather.json" > /dev/null
  grep -E "^(pinstream waited|vulkan's own back|pinstream back|CUDA:)" "$OUT_DIR/vulkan-latency.txt" \
    | sed "s/^/latency: /" >> "$OUT_DIR/inplace-summary.txt"
  cat "$OUT_DIR/inplace-summary.txt"
  exit 0
fi
if [ "$MODE" = all ]; then
  run vulkan-bench bench --api vulkan --sizes 4KiB..1GiB --repeat 5 --save "$OUT_DIR/vulkan-bench.json"
  run cuda-bench bench --api cuda --sizes 4KiB..1GiB --repeat 5 --save "$OUT_DIR/cuda-bench.json"
  run vulkan-demo demo --api vulkan --size 10GiB --vram-budget 4GiB --save "$OUT_DIR/vulkan-demo.json"
  run cuda-demo demo --api cuda --size 10GiB --vram-budget 4GiB --save "$OUT_DIR/cuda-demo.json"
fi
# With `mapped` (about two minutes): from here on only, the CUDA embedding run left out (gpu-mapped.sh has it).
# Mapped memory (issue 23 on Vulkan): doctor's kernel read/write line, and the embedding lookup
# over a 10 GiB table (three bindings of at most maxStorageBufferRange) beside CUDA's.
run vulkan-doctor doctor --api vulkan --save "$OUT_DIR/vulkan-doctor.json"
run vulkan-embedding demo --api vulkan --workload embedding --size 10GiB --save "$OUT_DIR/vulkan-embedding.json"
[ "$MODE" = all ] && run cuda-embedding demo --api cuda --workload embedding --size 10GiB --save "$OUT_DIR/cuda-embedding.json"
# psVkHostRegister of 10 GiB of malloc memory, streamed in 256 MiB blocks over its chunks on
# two queues, by the program's own VkDevice (issue 24: "streams at the same speed as the CLI").
find_opencl_dev # pinstream.h includes CL/cl.h: the system's headers, else the CUDA toolkit's
VKS=$(mktemp -d /tmp/vk-stream.XXXX)
mkdir -p "$VKS/lib"
ln -sf "$BIN_DIR/libpinstream_capi.so" "$VKS/lib/libpinstream.so.0"
ln -sf "$BIN_DIR/libpinstream_capi.so" "$VKS/lib/libpinstream.so"
if cc -std=c11 -O2 -Wall -I"$(dirname "$0")/../crates/pinstream-capi/include" ${CL_INC:+-I"$CL_INC"} \
    "$(dirname "$0")/../examples/c/vk_stream.c" -L"$VKS/lib" -lpinstream -ldl \
    -Wl,-rpath,"$VKS/lib" -o "$VKS/vk_stream" > "$OUT_DIR/vk-stream-build.log" 2>&1; then
  "$VKS/vk_stream" --total 10GiB --block 256MiB --repeat 5 > "$OUT_DIR/vk-stream.txt" 2>&1
  echo "rc=$?" >> "$OUT_DIR/vk-stream.txt"
  tail -n 25 "$OUT_DIR/vk-stream.txt"
else
  echo "vk_stream did not build (is $BIN_DIR/libpinstream_capi.so there? see vk-stream-build.log)"
  tail -n 25 "$OUT_DIR/vk-stream-build.log"
fi
rm -rf "$VKS"
run compare-vulkan compare --api vulkan --size 1GiB --repeat 3 --save "$OUT_DIR/compare-vulkan.json"
