#!/usr/bin/env bash
# Issue 13 on the GPU machine, in one go (~2 minutes of GPU time): `bench --latency` (one
# small write by every way of waiting: the NVIDIA OpenCL driver called directly, pinstream's
# path, CUDA's cuMemcpyHtoDAsync; both APIs, same run), then `demo --json` with each way of
# waiting (`--wait driver`, `--wait sleep`) for the CPU seconds per GiB, then a table of all.
#   scripts/gpu-small.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR: scripts/build-gpu-bundle.sh's output (NO_TESTS=1 is enough). Results under OUT_DIR
# (default $OUT): latency.json/.txt, demo-driver.json, demo-sleep.json, small.md (printed
# last). PINSTREAM_SMALL_DEMO_SIZE sets demo's --size (default 4GiB). Never changes the
# GPU's settings.
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
DEMO_SIZE=${PINSTREAM_SMALL_DEMO_SIZE:-4GiB}
mkdir -p "$OUT_DIR"
P=$BIN_DIR/pinstream
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT_DIR/run.log"; }
register_nvidia_icd
{ date -u; cat "$BIN_DIR/COMMIT" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > "$OUT_DIR/machine.txt" 2>&1
log "warming the VM's memory (${PINSTREAM_SMALL_WARM_GIB:-12} GiB once)"
warm_vm_memory "${PINSTREAM_SMALL_WARM_GIB:-12}" 5
log "bench --latency (both APIs)"
"$P" bench --latency --api both --strategy register --sizes 4KiB,64KiB,1MiB,8MiB --samples 2000 \
  --save "$OUT_DIR/latency.json" > "$OUT_DIR/latency.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/latency.txt"
for w in driver sleep; do
  log "demo --wait $w"
  "$P" demo --size "$DEMO_SIZE" --vram-budget 4GiB --wait "$w" --json > "$OUT_DIR/demo-$w.json" 2> "$OUT_DIR/demo-$w.err"
  echo "rc=$?" >> "$OUT_DIR/demo-$w.err"
done
python3 - "$OUT_DIR" <<'PY' > "$OUT_DIR/small.md" 2>&1
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        print(f"{name}: not read ({e})")
        return None
lat = load("latency.json")
if lat:
    print(f"## bench --latency: {lat['device']['name']}, {lat['samples']} samples, OpenCL memory {lat['strategy']}")
    if lat.get("cuda_unavailable"):
        print(f"CUDA: not measured: {lat['cuda_unavailable']}")
    for s in lat["sizes"]:
        print(f"\n### {s['size'] // 1024} KiB")
        print("| api | path | N | median µs | min µs | CPU µs | GB/s |\n|---|---|---|---|---|---|---|")
        for r in s["rows"]:
            print(f"| {r['api']} | {r['path']} | {r['per_sample']} | {r['median_us']:.2f} | {r['min_us']:.2f} | {r['cpu_us']:.2f} | {r['gbps']:.2f} |")
        gap, x = s.get("waited_gap_us"), s.get("back_to_back_vs_cuda")
        print(f"\npinstream waited - driver's fastest wait: {gap:+.2f} µs (goal <= 1)" if gap is not None else "")
        if x is not None:
            print(f"pinstream back to back / CUDA back to back: {x:.2f}x (goal >= 1)")
print("\n## demo: CPU seconds per GiB moved, by OpenCL's way of waiting")
print("| wait | workload | GB/s (up+down or weights) | wall s | CPU s | CPU s per GiB |\n|---|---|---|---|---|---|")
for w in ("driver", "sleep"):
    d = load(f"demo-{w}.json")
    for x in (d or {}).get("workloads", []):
        t = x["stream"]["totals"]
        gbps = t["combined_gbps"] if x["name"] == "in-place" else t["upload"]["gbps"]
        print(f"| {w} | {x['name']} | {gbps:.1f} | {t['device_wall_s']:.3f} | {x['cpu_s']:.3f} | {x['cpu_s_per_gib']:.4f} |")
PY
log "done"
cat "$OUT_DIR/small.md"
