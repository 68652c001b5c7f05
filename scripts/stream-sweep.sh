#!/usr/bin/env bash
# 10 GiB in place through a 4 GiB VRAM budget, by block size, slots and strategy, each with
# its one-queue baseline from the same process. On the GPU machine:
#   scripts/stream-sweep.sh [BIN_DIR] [OUT_DIR]
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}; SIZE=${PINSTREAM_SWEEP_SIZE:-10GiB}
mkdir -p "$OUT_DIR"
register_nvidia_icd
warm_vm_memory 40 10
for cfg in "64MiB 4 auto" "128MiB 4 auto" "256MiB 4 auto" "32MiB 8 auto" "64MiB 8 auto" "128MiB 8 auto" "64MiB 4 nv-host" "256MiB 4 nv-host" "256MiB 8 auto"; do
  set -- $cfg
  f="$OUT_DIR/sweep-$1-$2-$3.json"
  "$BIN_DIR/pinstream" run --kernel examples/scale.cl --entry scale --synthetic "$SIZE" --arg factor=2 \
    --vram-budget 4GiB --block "$1" --slots "$2" --strategy "$3" --compare-sequential --json > "$f" 2>> "$OUT_DIR/sweep.err"
  python3 - "$f" "$1" "$2" "$3" <<'PY' | tee -a "$OUT_DIR/stream-sweep.txt"
import json, sys
r = json.load(open(sys.argv[1])); s, q = r["stream"]["totals"], r["sequential"]["totals"]
print(f"block {sys.argv[2]:>6} slots {sys.argv[3]} {sys.argv[4]:>7}: combined {s['combined_gbps']:.1f} GB/s "
      f"(up {s['upload']['busy_gbps']:.1f}, down {s['download']['busy_gbps']:.1f} while busy), overlap {s['overlap']:.3f}, "
      f"wall {s['device_wall_s']:.3f} s; one queue {q['combined_gbps']:.1f} GB/s; VRAM peak {r['vram']['peak_over_before']/2**30:+.2f} GiB")
PY
done
