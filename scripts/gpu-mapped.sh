#!/usr/bin/env bash
# Issue 23 on the GPU machine (~2 minutes): mapped pinned memory. The scattered pieces through
# every way (scripts/gpu-gather.sh: staged gather, zero-copy gather, OpenCL's and CUDA's
# per-piece loops, cuMemcpyBatchAsync, CUDA's zero-copy kernel on cudaHostAllocMapped memory),
# the embedding lookup over a 10 GiB mapped table through OpenCL and through CUDA (rows/s side
# by side, the table's VRAM cost), and doctor's mapped-memory line (kernel read and write
# bandwidth, VRAM cost). Raw outputs under OUT_DIR, a table of the goals in OUT_DIR/mapped.md,
# with each zero-copy row's host side per call (checks and table, the call) beside its kernel (from
# 6b1c0c8 on, plan and call count the checks; before, they left them out).
#   scripts/gpu-mapped.sh [BIN_DIR] [OUT_DIR]
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
P=$BIN_DIR/pinstream
mkdir -p "$OUT_DIR"
register_nvidia_icd
warm_vm_memory 24 5
PINSTREAM_GATHER_REPEAT=${PINSTREAM_GATHER_REPEAT:-9} bash "$(dirname "$0")/gpu-gather.sh" "$BIN_DIR" "$OUT_DIR/gather" > /dev/null 2>&1
# A zero-copy call's host part (checks, table rows, launch) on one thread, split where the
# library's thresholds say (auto), and over every pool thread: the H200 host's figures behind
# the thresholds in gather/zerocopy/checks.rs.
if [ -x "$BIN_DIR/zero_copy_timeline" ]; then
  "$BIN_DIR/zero_copy_timeline" 4096 4096 65536 256 16384 1024 > "$OUT_DIR/zero-copy-timeline.txt" 2>&1
  echo "rc=$?" >> "$OUT_DIR/zero-copy-timeline.txt"
fi
for api in opencl cuda; do
  "$P" demo --workload embedding --api "$api" --save "$OUT_DIR/embedding-$api.json" > "$OUT_DIR/embedding-$api.txt" 2>&1
  echo "rc=$?" >> "$OUT_DIR/embedding-$api.txt"
done
"$P" doctor --json > "$OUT_DIR/doctor.json" 2> "$OUT_DIR/doctor.err"; echo "rc=$?" >> "$OUT_DIR/doctor.err"
"$P" doctor > "$OUT_DIR/doctor.txt" 2>&1; echo "rc=$?" >> "$OUT_DIR/doctor.txt"
python3 - "$OUT_DIR" <<'PY' > "$OUT_DIR/mapped.md" 2>&1
import json, os, sys
out = sys.argv[1]
print("## Zero-copy goals per shape (from gather/*.json)")
for f in sorted(os.listdir(os.path.join(out, "gather"))):
    if not f.endswith(".json"):
        continue
    g = json.load(open(os.path.join(out, "gather", f)))
    for d in ("h2d", "d2h"):
        x = g[d]
        fmt = lambda v, s: "-" if v is None else s.format(v)
        print(f"{f} {d}: zero-copy / peak {fmt(x.get('zero_copy_of_peak'), '{:.1%}')}, / CUDA zero-copy {fmt(x.get('zero_copy_vs_cuda_zero_copy'), '{:.3f}x')}, "
              f"/ CUDA loop {fmt(x.get('zero_copy_vs_cuda_loop'), '{:.1f}x')}, / cuMemcpyBatchAsync {fmt(x.get('zero_copy_vs_cuda_batch'), '{:.1f}x')}; "
              f"staged / peak {fmt(x.get('of_peak'), '{:.1%}')}")
        print(f"{f} {d}: vouched zero-copy (no overlap check) / peak {fmt(x.get('vouched_of_peak'), '{:.1%}')}, / CUDA zero-copy {fmt(x.get('vouched_vs_cuda_zero_copy'), '{:.3f}x')}, "
              f"/ CUDA loop {fmt(x.get('vouched_vs_cuda_loop'), '{:.1f}x')}, / cuMemcpyBatchAsync {fmt(x.get('vouched_vs_cuda_batch'), '{:.1f}x')}")
print("\n## Zero-copy host side per call (from gather/*.json): checks and table (plan), the call until it returns, the kernel, the wall")
for f in sorted(os.listdir(os.path.join(out, "gather"))):
    if not f.endswith(".json"):
        continue
    for r in json.load(open(os.path.join(out, "gather", f)))["rows"]:
        if "mapped" not in r["path"] or r.get("call_us") is None:
            continue
        k = (r.get("device") or {}).get("kernels") or [0, 0]
        mode = "vouched" if "vouched" in r["path"] else "checked"
        print(f"{f} {r['direction']} {mode}: plan {r['plan_us']:.1f} us, call {r['call_us']:.1f} us, kernel {k[1] * 1e6:.1f} us, wall {r['total_us']:.1f} us")
print("\n## Embedding lookup")
rows = {}
for api in ("opencl", "cuda"):
    try:
        rows[api] = json.load(open(os.path.join(out, f"embedding-{api}.json")))
    except Exception as e:
        print(f"{api}: no report ({e}); see embedding-{api}.txt")
for api, r in rows.items():
    print(f"{api}: {json.dumps(r)[:600]}")
PY
cat "$OUT_DIR/mapped.md"
