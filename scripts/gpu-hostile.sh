#!/usr/bin/env bash
# Issue 21 on the GPU machine, in one call: every test executable (scripts/gpu-tests.sh), the
# hostile kernel cases run one by one with their exit codes (a crash gets a backtrace from
# cuda-gdb where present), and the gather before and after the asynchronous batch calls
# (OLD_BIN: an earlier build's binary; runs alternate old/new), and the bounds guard's cost
# (scripts/bench-check-bounds.sh, OpenCL and CUDA).
#   scripts/gpu-hostile.sh [BIN_DIR] [OUT_DIR] [OLD_BIN]
# Results under OUT_DIR: tests/ (one file per executable), tests.log, kernels.txt,
# gather-*.json/txt, gather.md. Never changes the GPU's settings.
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BIN_DIR=$(readlink -f "${1:-gpu-bundle}"); OUT_DIR=${2:-${OUT:-out}}; OLD=${3:-}
mkdir -p "$OUT_DIR"
P=$BIN_DIR/pinstream
register_nvidia_icd
{ date -u; cat "$BIN_DIR/COMMIT"; nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > "$OUT_DIR/machine.txt" 2>&1

# The hostile kernel cases, each on its own (the test binary names only the first that fails).
K=$(mktemp -d)
printf '' > "$K/empty.cl"
printf 'int helper(int a) { return a; }\n' > "$K/none.cl"
printf '\000\001\002\377' > "$K/binary.cl"
printf '__kernel void scale(__global float *x, float factor, ulong n) { size_t i = get_global_id(0); if (i < n) x[i] *= factor; }\n' > "$K/scale.cl"
kcase() {
  "$P" "$@" > "$K/out.txt" 2>&1
  local rc=$?
  echo "rc=$rc: pinstream $*" >> "$OUT_DIR/kernels.txt"
  tail -3 "$K/out.txt" | sed 's/^/    /' >> "$OUT_DIR/kernels.txt"
  if [ "$rc" -ge 128 ] && command -v cuda-gdb >/dev/null; then
    timeout 120 cuda-gdb -batch -ex run -ex bt --args "$P" "$@" 2>&1 | tail -40 | sed 's/^/    gdb: /' >> "$OUT_DIR/kernels.txt"
  fi
}
for k in empty none binary; do kcase run --kernel "$K/$k.cl" --entry scale --synthetic 1MiB; done
kcase run --kernel "$K" --entry scale --synthetic 1MiB
for t in f64 u8 f16 i32; do kcase run --kernel "$K/scale.cl" --entry scale --synthetic 1MiB --arg factor=2 --dtype "$t"; done
cat "$OUT_DIR/kernels.txt"

# Every test executable.
bash scripts/gpu-tests.sh "$BIN_DIR" "$OUT_DIR/tests" 2>&1 | tee "$OUT_DIR/tests.log"

# The gather: 4096 x 4 KiB (one batch) and 16384 x 4 KiB (more batches than the staging sets),
# old and new binaries alternating.
for round in 1 2; do
  for which in old new; do
    B=$P; [ "$which" = old ] && B=$OLD
    [ -x "$B" ] || continue
    for n in 4096 16384; do
      "$B" bench gather --api opencl --pieces $n --piece-size 4KiB --repeat 20 \
        --save "$OUT_DIR/gather-$which-$n-$round.json" > "$OUT_DIR/gather-$which-$n-$round.txt" 2>&1
    done
  done
done
python3 - "$OUT_DIR" <<'PY' | tee "$OUT_DIR/gather.md"
import glob, json, os, sys
out = sys.argv[1]
print("| binary | pieces | round | H2D GB/s | D2H GB/s | H2D of peak | D2H of peak |")
print("|---|---|---|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(out, "gather-*.json"))):
    _, which, n, rnd = os.path.basename(f)[:-5].split("-")
    g = json.load(open(f))
    rows = {r["direction"]: r for r in g["rows"] if r["api"] == "pinstream"}
    print(f"| {which} | {n} | {rnd} | {rows['h2d']['gbps']:.2f} | {rows['d2h']['gbps']:.2f} | {g['h2d']['of_peak']:.3f} | {g['d2h']['of_peak']:.3f} |")
PY

# The bounds guard's cost on the GPU (run --check-bounds on against off), OpenCL and CUDA.
for api in opencl cuda; do
  SIZE=${GUARD_SIZE:-4GiB} REPEATS=${GUARD_REPEATS:-3} API=$api \
    bash scripts/bench-check-bounds.sh "$P" "$OUT_DIR/check-bounds-$api" > "$OUT_DIR/check-bounds-$api.txt" 2>&1
  cat "$OUT_DIR/check-bounds-$api/bounds.md" 2>/dev/null || tail -5 "$OUT_DIR/check-bounds-$api.txt"
done
