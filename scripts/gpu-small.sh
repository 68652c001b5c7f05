#!/usr/bin/env bash
# Issue 13 on the GPU machine, in one go (~2 minutes of GPU time): `bench latency` (one
# small write by every way of waiting: the NVIDIA OpenCL driver called directly, pinstream's
# path, CUDA's cuMemcpyHtoDAsync; both APIs, same run), then `demo --json` with each way of
# waiting (`--wait driver`, `--wait sleep`) for the CPU seconds per GiB, then a table of all.
#   scripts/gpu-small.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR: scripts/build-gpu-bundle.sh's output (NO_TESTS=1 is enough). Results under OUT_DIR
# (default $OUT): latency.json/.txt, demo-driver.json, demo-sleep.json, small.md (printed
# last). PINSTREAM_SMALL_DEMO_SIZE sets demo's --size (default 10GiB), DEMO_REPEAT its repeats
# per way of waiting (default 3; WAYS, default "driver sleep auto"), alternating; then `compare`
# (COMPARE=0 leaves it out) for CPU per GiB with the default wait. Never changes the
# GPU's settings.
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
DEMO_SIZE=${PINSTREAM_SMALL_DEMO_SIZE:-10GiB}
mkdir -p "$OUT_DIR"
P=$BIN_DIR/pinstream
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT_DIR/run.log"; }
register_nvidia_icd
{ date -u; cat "$BIN_DIR/COMMIT" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > "$OUT_DIR/machine.txt" 2>&1
log "warming the VM's memory (${PINSTREAM_SMALL_WARM_GIB:-24} GiB once)"
warm_vm_memory "${PINSTREAM_SMALL_WARM_GIB:-24}" 5
if [ "${LATENCY:-1}" = 1 ]; then
  log "bench latency (both APIs)"
  "$P" bench latency --api both --strategy register --sizes 4KiB,64KiB,1MiB,8MiB --samples 2000 \
    --save "$OUT_DIR/latency.json" > "$OUT_DIR/latency.txt" 2>&1
  echo "rc=$?" >> "$OUT_DIR/latency.txt"
fi
# Each way of waiting DEMO_REPEAT times, alternating, so drift hits both alike.
for r in $(seq 1 "${DEMO_REPEAT:-3}"); do
  ways="${WAYS:-driver sleep auto}"; [ $((r % 2)) = 0 ] && ways=$(echo "$ways" | tr ' ' '\n' | tac | tr '\n' ' ')
  for w in $ways; do
    log "demo --wait $w (repeat $r)"
    "$P" demo --size "$DEMO_SIZE" --vram-budget 4GiB --wait "$w" --json > "$OUT_DIR/demo-$w-r$r.json" 2> "$OUT_DIR/demo-$w-r$r.err"
    echo "rc=$?" >> "$OUT_DIR/demo-$w-r$r.err"
  done
done
# CPU per GiB of OpenCL's engine (waiting by sleeping) against CUDA's on the same workloads.
if [ "${COMPARE:-1}" = 1 ]; then
  log "compare (the default wait, auto)"
  "$P" compare --repeat 3 --save "$OUT_DIR/compare-auto.compare" > "$OUT_DIR/compare-auto.txt" 2>&1
  echo "rc=$?" >> "$OUT_DIR/compare-auto.txt"
fi
python3 - "$OUT_DIR" <<'PY' > "$OUT_DIR/small.md" 2>&1
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        print(f"{name}: not read ({e})")
        return None
lat = load("latency.json") if os.path.exists(os.path.join(out, "latency.json")) else None
if lat:
    print(f"## bench --latency: {lat['device']['name']}, {lat['samples']} samples, pinstream's memory {lat['pinning']}")
    if lat.get("cuda_unavailable"):
        print(f"CUDA: not measured: {lat['cuda_unavailable']}")
    for s in lat["sizes"]:
        print(f"\n### {s['size'] // 1024} KiB")
        print("| api | queue | path | N | median µs | min µs | CPU µs | GB/s |\n|---|---|---|---|---|---|---|---|")
        for r in s["rows"]:
            q = "stream" if r["api"] == "cuda" else ("profiled" if r.get("profiled") else "plain")
            print(f"| {r['api']} | {q} | {r['path']} | {r['per_sample']} | {r['median_us']:.2f} | {r['min_us']:.2f} | {r['cpu_us']:.2f} | {'-' if r.get('gbps') is None else format(r['gbps'], '.2f')} |")
        for key, what in (("waited_gap_us", "pinstream waited - the API's own fastest wait, plain queues (goal <= 1)"),
                          ("profiled_gap_us", "pinstream waited - the API's own fastest wait, profiled queues"),
                          ("profiling_cost_us", "event profiling's cost per waited transfer")):
            if s.get(key) is not None:
                print(f"\n{what}: {s[key]:+.2f} µs")
        for key, what in (("back_to_back_vs_cuda", "pinstream back to back / CUDA back to back (goal >= 1)"),
                          ("driver_back_to_back_vs_cuda", "the OpenCL driver's own back to back / CUDA's")):
            if s.get(key) is not None:
                print(f"\n{what}: {s[key]:.2f}x")
import glob, statistics
print("\n## demo: CPU seconds per GiB moved, by OpenCL's way of waiting (medians over the repeats)")
print("| wait | workload | runs | GB/s (up+down or weights) | CPU s per GiB |\n|---|---|---|---|---|")
med = {}
for w in ("driver", "sleep", "auto"):
    runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, f"demo-{w}-r*.json"))) if os.path.getsize(f)]
    by = {}
    for d in runs:
        for x in d.get("workloads", []):
            t = x["stream"]["totals"]
            gbps = t["combined_gbps"] if x["name"] == "in-place" else t["upload"]["gbps"]
            by.setdefault(x["name"], []).append((gbps, x["cpu_s_per_gib"]))
    for name, v in by.items():
        g, c = statistics.median(a for a, _ in v), statistics.median(b for _, b in v)
        med[(w, name)] = (g, c)
        print(f"| {w} | {name} | {len(v)} | {g:.2f} | {c:.4f} |")
for name in sorted({n for _, n in med}):
    for w in ("sleep", "auto"):
        if ("driver", name) in med and (w, name) in med:
            (gd, cd), (gs, cs) = med[("driver", name)], med[(w, name)]
            print(f"\n{name}: {w}/driver throughput {gs / gd:.4f} (goal >= 0.99), CPU per GiB {cs / cd:.3f}x")
PY
log "done"
cat "$OUT_DIR/compare-auto.txt" 2>/dev/null
cat "$OUT_DIR/small.md"
