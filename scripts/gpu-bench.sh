#!/usr/bin/env bash
# `pinstream bench` on the GPU machine: every strategy, 4 KiB to 1 GiB blocks, 5 repeats.
#   scripts/gpu-bench.sh [BIN_DIR] [OUT_DIR]
set -u
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
mkdir -p "$OUT_DIR"
if ! grep -qs libnvidia-opencl /etc/OpenCL/vendors/*.icd; then
  mkdir -p /etc/OpenCL/vendors && echo /usr/lib/libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
fi
python3 -c "b = bytearray(16 << 30); b[::4096] = b'\x01' * (len(b) // 4096)"; sleep 5
"$BIN_DIR/pinstream" bench --sizes 4KiB..1GiB --repeat 5 --save "$OUT_DIR/bench.json" --plot "$OUT_DIR/bench.svg" \
  > "$OUT_DIR/bench.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/bench.txt"
grep -E "^[a-z-]+$|peak|rc=" "$OUT_DIR/bench.txt"
