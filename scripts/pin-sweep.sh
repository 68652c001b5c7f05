#!/usr/bin/env bash
# Time to pin 10 GiB with `register` by registration chunk size, on the GPU machine.
#   scripts/pin-sweep.sh [BIN_DIR] [OUT_DIR]
# Each chunk size runs twice, alternating, after the VM's memory is warmed (see gpu-check.sh).
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}; SIZE=${PINSTREAM_CHECK_SIZE:-10GiB}
mkdir -p "$OUT_DIR"
register_nvidia_icd
warm_vm_memory 40 0
for round in 1 2; do
  for chunk in 35GiB 2GiB 1GiB 640MiB 256MiB 64MiB; do
    "$BIN_DIR/pinstream" doctor --size "$SIZE" --strategy register --max-chunk "$chunk" --repeat 1 \
      --save "$OUT_DIR/pin-$chunk-$round.json" > /dev/null 2>> "$OUT_DIR/pin-sweep.err"
    python3 - "$OUT_DIR/pin-$chunk-$round.json" "$chunk" "$round" <<'PY' | tee -a "$OUT_DIR/pin-sweep.txt"
import json, sys
r = json.load(open(sys.argv[1]))["strategies"][0]
print(f"chunk {sys.argv[2]:>6} round {sys.argv[3]}: chunks {r['chunks']:3d} pin {r['pin_s']:.3f} s "
      f"(resident {r['resident_s']:.3f}) VRAM {r['vram_cost']/2**30:+.2f} GiB "
      f"H2D {r['h2d']['wall_gbps']:.1f} D2H {r['d2h']['wall_gbps']:.1f} both {r['both']['wall_gbps']:.1f}")
PY
  done
done
