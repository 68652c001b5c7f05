#!/usr/bin/env bash
# Issue 13 goal 2 on the GPU machine (~1 minute of GPU time): `bench gather --api both` at
# 4096 x 4 KiB (the goal: gather >= 50% of the one-way peak and >= 10x CUDA's per-piece
# cuMemcpyHtoDAsync loop), 65536 x 256 B and 1024 x 64 KiB, every row read back and checked,
# then the 4096 x 4 KiB shape again with 4 MiB and 64 MiB of staging per batch (default 16 MiB;
# OpenCL rows only) to see where pipelining pays, then one table of all.
#   scripts/gpu-gather.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR: scripts/build-gpu-bundle.sh's output (NO_TESTS=1 is enough). Results under OUT_DIR
# (default $OUT): gather-<pieces>x<size>[-<staging>].json/.txt, gather.md (printed last). The bundle's
# default build calls CUDA 13's cuMemcpyBatchAsync; on an older driver that row says why it
# is missing. PINSTREAM_GATHER_REPEAT sets --repeat (default 20). Never changes the GPU's
# settings.
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
REPEAT=${PINSTREAM_GATHER_REPEAT:-20}
mkdir -p "$OUT_DIR"
P=$BIN_DIR/pinstream
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT_DIR/run.log"; }
register_nvidia_icd
{ date -u; cat "$BIN_DIR/COMMIT" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > "$OUT_DIR/machine.txt" 2>&1
SHAPES="4096x4KiB 65536x256 1024x64KiB 4096x4KiB-4MiB 4096x4KiB-64MiB"
for shape in $SHAPES; do
  n=${shape%%x*}; rest=${shape#*x}; s=${rest%%-*}; staging=16MiB; api=both
  case $rest in *-*) staging=${rest#*-}; api=opencl ;; esac
  log "bench gather --pieces $n --piece-size $s --staging $staging --api $api"
  "$P" bench gather --api "$api" --pieces "$n" --piece-size "$s" --staging "$staging" --repeat "$REPEAT" \
    --save "$OUT_DIR/gather-$shape.json" > "$OUT_DIR/gather-$shape.txt" 2>&1
  echo "rc=$?" >> "$OUT_DIR/gather-$shape.txt"
done
python3 - "$OUT_DIR" $SHAPES <<'PY' > "$OUT_DIR/gather.md" 2>&1
import json, os, sys
out = sys.argv[1]
for shape in sys.argv[2:]:
    try:
        g = json.load(open(os.path.join(out, f"gather-{shape}.json")))
    except Exception as e:
        print(f"\n## {shape}: not read ({e}); see gather-{shape}.txt")
        continue
    s = g["shape"]
    print(f"\n## {s['pieces']} pieces x {s['piece_size']} B ({g['total_bytes'] / 2**20:.1f} MiB one way), staging {g['gather_capacity'] / 2**20:g} MiB per batch, {g['device']['name']}, median of {s['repeat']}")
    for k in ("cuda_unavailable", "batch_unavailable", "zero_copy_unavailable"):
        if g.get(k):
            print(f"{k}: {'; '.join(g[k]) if isinstance(g[k], list) else g[k]}")
    print("| dir | api | path | total µs | GB/s | µs/piece | vs CUDA loop | host copy µs (batches) |\n|---|---|---|---|---|---|---|---|")
    for r in g["rows"]:
        x = r["vs_cuda_loop"]
        c = r.get("host_copy_us")
        copy = "-" if c is None else f"{c:.1f} ({r['batches']})"
        print(f"| {r['direction']} | {r['api']} | {r['path']} | {r['total_us']:.1f} | {r['gbps']:.2f} | {r['us_per_piece']:.3f} | {'-' if x is None else f'{x:.2f}x'} | {copy} |")
    for r in g["rows"]:
        if r.get("call_us") is None:
            continue
        line = f"\n{r['direction']} gather: host plan {r['plan_us']:.1f} µs, copy {r['host_copy_us']:.1f} µs, call {r['call_us']:.1f} µs of {r['total_us']:.1f}"
        d = r.get("device")
        if d:
            k = d.get("kernels")
            line += f"; device (one profiled call): DMA {d['dma'][1] * 1e6:.1f} µs in {d['dma'][0]}, "
            line += f"kernels {k[1] * 1e6:.1f} µs in {k[0]}, " if k else "kernels not profiled, "
            line += f"span {d['span_s'] * 1e6:.1f} µs"
        print(line)
    for d in ("h2d", "d2h"):
        goal = g[d]
        f = lambda v, fmt: "not measured" if v is None else fmt.format(v)
        print(f"\n{d}: gather / peak {f(goal['of_peak'] and goal['of_peak'] * 100, '{:.0f}%')} (goal >= 50%), "
              f"gather / CUDA loop {f(goal['vs_cuda_loop'], '{:.1f}x')} (goal >= 10x), "
              f"gather / cuMemcpyBatchAsync {f(goal['vs_cuda_batch'], '{:.2f}x')}")
        print(f"{d}: zero-copy gather / peak {f(goal['zero_copy_of_peak'] and goal['zero_copy_of_peak'] * 100, '{:.0f}%')} (goal >= 85%), "
              f"zero-copy / CUDA zero-copy kernel {f(goal['zero_copy_vs_cuda_zero_copy'], '{:.3f}x')} (goal >= 0.97x), "
              f"zero-copy / CUDA loop {f(goal['zero_copy_vs_cuda_loop'], '{:.1f}x')} (goal >= 20x), "
              f"zero-copy / cuMemcpyBatchAsync {f(goal['zero_copy_vs_cuda_batch'], '{:.1f}x')} (goal >= 15x)")
PY
log "done"
cat "$OUT_DIR/gather.md"
