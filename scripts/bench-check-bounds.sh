#!/usr/bin/env bash
# The bounds guard's cost (`run --check-bounds on` against `off`), the same work alternating
# (which goes first alternating too),
# REPEATS times each, for each block size: a pairwise sum (`--reduce 2`, one input and one
# output buffer guarded per block) over SIZE of synthetic floats. Prints a table of the
# stream's host wall time (median and minimum: on a shared machine the minimum is the less
# disturbed figure) and combined GB/s (median), and the ratios on/off (wall: > 1 is the
# guard's cost). Runs on PoCL here and on a GPU (API=cuda for the CUDA engine).
#   scripts/bench-check-bounds.sh [PINSTREAM_BIN] [OUT_DIR]
# Environment: SIZE (default 1GiB), BLOCKS (default "64MiB 4MiB 1MiB"), REPEATS (default 5),
# API (opencl or cuda, default opencl), DEVICE (--device, default the default device).
# Results: OUT_DIR/{on,off}-BLOCK-N.json and bounds.md. Never changes a GPU's settings.
set -u
P=${1:-target/release/pinstream}
OUT_DIR=${2:-${OUT:-out}/check-bounds}
SIZE=${SIZE:-1GiB}; BLOCKS=${BLOCKS:-64MiB 4MiB 1MiB}; REPEATS=${REPEATS:-5}; API=${API:-opencl}
[ -x "$P" ] || { echo "no $P: build it (cargo build --release -p pinstream-cli)" >&2; exit 2; }
mkdir -p "$OUT_DIR"
if [ "$API" = cuda ]; then
  K="$OUT_DIR/pairs.cu"
  cat > "$K" <<'K'
extern "C" __global__ void pairs(const float* x, float* y, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 2) y[i] = x[2 * i] + x[2 * i + 1];
}
K
else
  K="$OUT_DIR/pairs.cl"
  cat > "$K" <<'K'
__kernel void pairs(__global const float* x, __global float* y, ulong n) {
    size_t i = get_global_id(0);
    if (i < n / 2) y[i] = x[2 * i] + x[2 * i + 1];
}
K
fi
dev=(); [ -n "${DEVICE:-}" ] && dev=(--device "$DEVICE")
for block in $BLOCKS; do
  for i in $(seq 1 "$REPEATS"); do
    # Which goes first alternates too: the second run of a pair finds the first's memory
    # just freed, and that alone moved the medians by 10-30% on a shared machine.
    order="on off"; [ $((i % 2)) = 0 ] && order="off on"
    for mode in $order; do
      "$P" run --api "$API" "${dev[@]}" --kernel "$K" --entry pairs --synthetic "$SIZE" --reduce 2 \
        --block "$block" --check-bounds "$mode" --seed 1 --json \
        > "$OUT_DIR/$mode-$block-$i.json" 2> "$OUT_DIR/$mode-$block-$i.err" \
        || echo "$mode $block $i: rc=$? ($(tail -1 "$OUT_DIR/$mode-$block-$i.err"))" >&2
    done
  done
done
python3 - "$OUT_DIR" "$BLOCKS" "$REPEATS" "$SIZE" <<'PY' | tee "$OUT_DIR/bounds.md"
import json, os, statistics, sys
out, blocks, repeats, size = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4]
print(f"## run --check-bounds on vs off: pairs, --reduce 2, {size} synthetic, {repeats} repeats each, alternating\n")
print("| block | blocks | device | on wall s (median) | off wall s (median) | wall on/off | on wall s (min) | off wall s (min) | min on/off | on GB/s | off GB/s | GB/s on/off |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for b in blocks:
    got = {"on": [], "off": []}
    n, device = "?", "?"
    for mode in got:
        for i in range(1, repeats + 1):
            try:
                d = json.load(open(os.path.join(out, f"{mode}-{b}-{i}.json")))
            except Exception:
                continue
            s = d["stream"]
            n, device = s["blocks"], d["device"]
            if s.get("bounds_guard") != (mode == "on"):
                print(f"{mode}-{b}-{i}: bounds_guard is {s.get('bounds_guard')}", file=sys.stderr)
                continue
            got[mode].append((s["host_wall_s"], s["totals"]["combined_gbps"]))
    if not got["on"] or not got["off"]:
        print(f"| {b} | - | - | not measured | | | | | | | | |")
        continue
    med = lambda m, k: statistics.median(x[k] for x in got[m])
    won, woff, gon, goff = med("on", 0), med("off", 0), med("on", 1), med("off", 1)
    mon, moff = min(x[0] for x in got["on"]), min(x[0] for x in got["off"])
    print(f"| {b} | {n} | {device} | {won:.4f} | {woff:.4f} | {won / woff:.3f} | {mon:.4f} | {moff:.4f} | {mon / moff:.3f} | {gon:.2f} | {goff:.2f} | {gon / goff:.3f} |")
PY
