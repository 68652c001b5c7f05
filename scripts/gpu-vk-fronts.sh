#!/usr/bin/env bash
# Issue 37's Vulkan spelling on the GPU machine: the seed's work (10 GiB of uint32 in place,
# 256 MiB blocks, a 4 GiB budget, examples/seed.wgsl) through the CLI and through psVkStream*
# from a Vulkan program, in rounds whose order turns:
#   cli     pinstream run --api vulkan --synthetic 10GiB --passes 5 --residency off
#   c-call  examples/c/vk_stream.c --engine: psVkHostRegister of 10 GiB of malloc memory, then
#           2 runs of psStreamRun with 5 passes on a psVkStreamCreate stream (the first imports
#           the range into the stream's own device; its wall time says what that costs)
# Each figure is a whole run's combined GB/s (bytes up and down over the device time: one
# pipeline fill and drain per 5 passes for both). The table gives the C call over the CLI per
# round and the median.
#   scripts/gpu-vk-fronts.sh BUNDLE OUT_DIR [ROUNDS]
# Never changes the GPU's settings.
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BUNDLE=$(readlink -f "$1"); OUT_DIR=$2; ROUNDS=${3:-2}
mkdir -p "$OUT_DIR" && OUT_DIR=$(readlink -f "$OUT_DIR")
use_nvidia_vulkan "$BUNDLE" "$OUT_DIR"
find_opencl_dev # pinstream.h includes CL/cl.h: the system's headers, else the CUDA toolkit's
BIN=$(mktemp -d /tmp/vk-fronts.XXXX)
trap 'rm -rf "$BIN"' EXIT
mkdir -p "$BIN/lib"
ln -sf "$BUNDLE/libpinstream_capi.so" "$BIN/lib/libpinstream.so.0"
ln -sf "$BUNDLE/libpinstream_capi.so" "$BIN/lib/libpinstream.so"
cc -std=c11 -O2 -Wall -Icrates/pinstream-capi/include ${CL_INC:+-I"$CL_INC"} examples/c/vk_stream.c \
  -L"$BIN/lib" -lpinstream -ldl -Wl,-rpath,"$BIN/lib" -o "$BIN/vk_stream" > "$OUT_DIR/build.log" 2>&1 \
  || { echo "vk_stream did not build:"; tail -20 "$OUT_DIR/build.log"; exit 1; }
[ -n "${SKIP_WARM:-}" ] || warm_vm_memory 24 10 >> "$OUT_DIR/build.log" 2>&1
rc=0
cli() {
  timeout 200 "$BUNDLE/pinstream" run --api vulkan --kernel examples/seed.wgsl --entry seed --synthetic 10GiB \
    --dtype u32 --block 256MiB --vram-budget 4GiB --passes 5 --residency off --json \
    > "$OUT_DIR/cli-$1.json" 2> "$OUT_DIR/cli-$1.err" || rc=1
}
call() {
  timeout 200 "$BIN/vk_stream" --engine examples/seed.wgsl --total 10GiB --block 256MiB --budget 4GiB \
    --repeat 2 --passes 5 > "$OUT_DIR/c-call-$1.txt" 2>&1 || rc=1
  tail -n 4 "$OUT_DIR/c-call-$1.txt"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then cli "$r"; call "$r"; else call "$r"; cli "$r"; fi
done
python3 - "$OUT_DIR" "$ROUNDS" <<'PY' | tee "$OUT_DIR/table.md"
import json, re, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
print("| round | first | CLI GB/s | C call GB/s (runs) | C call / CLI | first run's wall s (import included) | second run's wall s | check |")
print("|---|---|---|---|---|---|---|---|")
ratios = []
for r in range(1, rounds + 1):
    try:
        cli = json.load(open(f"{d}/cli-{r}.json"))["stream"]["totals"]["combined_gbps"]
    except (OSError, ValueError, KeyError) as e:
        cli = None
    text = open(f"{d}/c-call-{r}.txt").read() if __import__("os").path.exists(f"{d}/c-call-{r}.txt") else ""
    runs = [float(x) for x in re.findall(r"combined ([0-9.]+) GB/s", text)]
    walls = [float(x) for x in re.findall(r"wall ([0-9.]+) s", text)]
    check = "PASS" if "engine check: PASS" in text else "**not passed**"
    call = statistics.median(runs) if runs else None
    ratio = call / cli if call and cli else None
    if ratio:
        ratios.append(ratio)
    f = lambda x: "-" if x is None else f"{x:.2f}"
    first = "CLI" if r % 2 else "C call"
    print(f"| {r} | {first} | {f(cli)} | {f(call)} ({', '.join(f'{x:.2f}' for x in runs)}) | {'-' if ratio is None else f'{ratio:.3f}'} "
          f"| {f(walls[0] if walls else None)} | {f(walls[1] if len(walls) > 1 else None)} | {check} |")
if ratios:
    print(f"\nC call / CLI, median over {len(ratios)} round(s): {statistics.median(ratios):.3f} (goal >= 0.99)")
PY
exit $rc
