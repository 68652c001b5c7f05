#!/usr/bin/env bash
# Issue 13, goal 3 on the GPU machine (~1 minute of GPU time): `demo` in place over 10 GiB,
# 256 MiB blocks, 4 GiB VRAM budget, with the data pinned as the stream goes
# (`--progressive on`) and up front (`--progressive off`), alternating, 3 repeats each, then
# a table: the time from the call to the first block on the device (bar: <= 50 ms with on),
# the stream's combined GB/s (bar: on within 1% of off, off >= 97), the time from the call to
# the end, and the ratios on/off.
#   scripts/gpu-progressive.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR: scripts/build-gpu-bundle.sh's output (NO_TESTS=1 is enough). Results under OUT_DIR
# (default $OUT): demo-{on,off}-{1,2,3}.json (and .err), trace-on-1.json (Perfetto: the
# chunks' pinning on a host track beside the queues), machine.txt, run.log and
# progressive.md (printed last). PINSTREAM_PROGRESSIVE_SIZE sets --size (default 10GiB).
# Never changes the GPU's settings.
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
SIZE=${PINSTREAM_PROGRESSIVE_SIZE:-10GiB}
mkdir -p "$OUT_DIR"
P=$BIN_DIR/pinstream
[ -x "$P" ] || { echo "no $P: build it with scripts/build-gpu-bundle.sh" >&2; exit 2; }
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT_DIR/run.log"; }
register_nvidia_icd
{ date -u; cat "$BIN_DIR/COMMIT" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo; } > "$OUT_DIR/machine.txt" 2>&1
log "warming the VM's memory (${PINSTREAM_PROGRESSIVE_WARM_GIB:-24} GiB once)"
warm_vm_memory "${PINSTREAM_PROGRESSIVE_WARM_GIB:-24}" 5
for i in 1 2 3; do
  for mode in on off; do
    extra=()
    [ "$i$mode" = 1on ] && extra=(--trace "$OUT_DIR/trace-on-1.json")
    log "demo --progressive $mode (repeat $i)"
    "$P" demo --size "$SIZE" --block 256MiB --vram-budget 4GiB --progressive "$mode" "${extra[@]}" --json \
      > "$OUT_DIR/demo-$mode-$i.json" 2> "$OUT_DIR/demo-$mode-$i.err"
    echo "rc=$?" >> "$OUT_DIR/demo-$mode-$i.err"
  done
done
python3 - "$OUT_DIR" <<'PY' | tee "$OUT_DIR/progressive.md"
import json, os, statistics, sys
out = sys.argv[1]
rows = {"on": [], "off": []}
size = "?"
for mode in rows:
    for i in (1, 2, 3):
        name = f"demo-{mode}-{i}.json"
        try:
            d = json.load(open(os.path.join(out, name)))
            w = d["workloads"][0]
            c = d["config"]
            size = f"{c['data_bytes'] / 2**30:g} GiB, {c['block_bytes'] >> 20} MiB blocks, {c['vram_budget'] / 2**30:g} GiB budget"
        except Exception as e:
            print(f"{name}: not read ({e})")
            continue
        s = w["stream"]
        rows[mode].append({
            "first_ms": w.get("first_block_ms"), "gbps": s["totals"]["combined_gbps"],
            "done_s": w.get("done_s"), "pin_done_s": w.get("pin_done_s"),
            "wait_s": s.get("pin_wait_s"), "chunks": len(w.get("chunk_pins", [])),
            "progressive": w.get("progressive"), "mismatches": w["mismatches"],
        })
print(f"## demo in place, {size}: pinned as it streams (on) or up front (off)\n")
print("| mode | repeat | progressive | chunks | first block ms | combined GB/s | stream waited s | last chunk pinned s | call to end s | mismatches |")
print("|---|---|---|---|---|---|---|---|---|---|")
f = lambda v, p: "-" if v is None else f"{v:.{p}f}"
for mode, rs in rows.items():
    for i, r in enumerate(rs, 1):
        print(f"| {mode} | {i} | {r['progressive']} | {r['chunks']} | {f(r['first_ms'], 1)} | {f(r['gbps'], 1)} | {f(r['wait_s'], 3)} | {f(r['pin_done_s'], 3)} | {f(r['done_s'], 3)} | {r['mismatches']} |")
def med(mode, key):
    v = [r[key] for r in rows[mode] if r[key] is not None]
    return statistics.median(v) if v else None
print("\n| median | first block ms | combined GB/s | call to end s |\n|---|---|---|---|")
for mode in rows:
    print(f"| {mode} | {f(med(mode, 'first_ms'), 1)} | {f(med(mode, 'gbps'), 1)} | {f(med(mode, 'done_s'), 3)} |")
on, off = med("on", "gbps"), med("off", "gbps")
fon, foff = med("on", "first_ms"), med("off", "first_ms")
don, doff = med("on", "done_s"), med("off", "done_s")
if on and off:
    print(f"\ncombined GB/s on/off: {on / off:.3f} (bar: >= 0.99; off >= 97: {'ok' if off >= 97 else 'NO'})")
if fon is not None:
    print(f"first block with on: {fon:.1f} ms (bar: <= 50 ms: {'ok' if fon <= 50 else 'NO'}); off: {f(foff, 1)} ms")
if don and doff:
    print(f"call to end on/off: {don / doff:.3f}")
PY
