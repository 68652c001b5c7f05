#!/usr/bin/env bash
# Builds and runs scripts/zero-copy-probe.c (kernel shapes for zero-copy gathers) on the GPU
# machine; its output in OUT_DIR/zero-copy-probe.txt.
#   scripts/gpu-zero-copy-probe.sh [OUT_DIR]
set -u
. "$(dirname "$0")/gpu-common.sh"
OUT_DIR=${1:-${OUT:-out}}
mkdir -p "$OUT_DIR"
register_nvidia_icd
find_opencl_dev
cc -O2 ${CL_INC:+-I"$CL_INC"} -o /tmp/zero-copy-probe "$(dirname "$0")/zero-copy-probe.c" "$CL_LIB" \
  && /tmp/zero-copy-probe > "$OUT_DIR/zero-copy-probe.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/zero-copy-probe.txt"
cat "$OUT_DIR/zero-copy-probe.txt"
