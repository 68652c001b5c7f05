#!/usr/bin/env bash
# The best configurations of stream-sweep.sh, three times each, interleaved, then the demo
# with register (auto) and with nv-host. On the GPU machine:
#   scripts/stream-repeat.sh [BIN_DIR] [OUT_DIR]
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
mkdir -p "$OUT_DIR"
register_nvidia_icd
warm_vm_memory 40 10
for round in 1 2 3; do
  for cfg in "64MiB 4 register" "64MiB 4 nv-host" "128MiB 8 register"; do
    set -- $cfg
    f="$OUT_DIR/repeat-$1-$2-$3-$round.json"
    "$BIN_DIR/pinstream" run --kernel examples/scale.cl --entry scale --synthetic 10GiB --arg factor=2 \
      --vram-budget 4GiB --block "$1" --slots "$2" --strategy "$3" --compare-sequential --json > "$f" 2>> "$OUT_DIR/repeat.err"
    python3 - "$f" "$1" "$2" "$3" "$round" <<'PY' | tee -a "$OUT_DIR/stream-repeat.txt"
import json, sys
r = json.load(open(sys.argv[1])); s, q = r["stream"]["totals"], r["sequential"]["totals"]
print(f"round {sys.argv[5]} block {sys.argv[2]:>6} slots {sys.argv[3]} {sys.argv[4]:>8}: combined {s['combined_gbps']:.1f} GB/s "
      f"(up {s['upload']['busy_gbps']:.1f}, down {s['download']['busy_gbps']:.1f} while busy), overlap {s['overlap']:.3f}; "
      f"one queue {q['combined_gbps']:.1f} GB/s")
PY
  done
done
for s in register nv-host; do
  "$BIN_DIR/pinstream" demo --vram-budget 4GiB --compare-sequential --strategy $s --save "$OUT_DIR/demo-$s.json" > "$OUT_DIR/demo-$s.txt" 2>&1
  echo "demo $s rc=$?" | tee -a "$OUT_DIR/stream-repeat.txt"
  grep -E "^(==|wall|baseline|check|VRAM)" "$OUT_DIR/demo-$s.txt"
done
