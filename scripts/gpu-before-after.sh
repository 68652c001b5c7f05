#!/usr/bin/env bash
# Issue 22's before/after on the GPU machine: the house was rebuilt (the Api lifted, fronts
# written once), so every figure must read as before, within noise. Two bundles built by
# scripts/build-gpu-bundle.sh (BEFORE from the commit before the work, AFTER from HEAD), run
# back to back on one machine:
#   1. compare and demo: scripts/gpu-redesign.sh BEFORE AFTER (compare 10 GiB, 4 GiB budget,
#      3 repeats; demo), into OUT/compare-demo/ with its table.
#   2. the seed port (examples/c/seed_port.c, 10 GiB pinned, 256 MiB blocks, 4 GiB budget,
#      3 repeats) linked against each bundle's libpinstream_capi.so, alloc and register modes,
#      before, after, after, before.
#   3. the layer: crates/pinstream-layer/c/classic_recipe.c (10 x 1 GiB ALLOC_HOST_PTR, 3
#      repeats) with each bundle's libpinstream_layer.so through LD_PRELOAD, VRAM read by
#      nvidia-smi before and at the peak; before, after.
#   scripts/gpu-before-after.sh BEFORE AFTER [OUT_DIR]      (carry both bundles)
# OUT_DIR (default $OUT) receives compare-demo/, seed/*.txt, layer/*.txt, and table.md (the
# seed and layer figures side by side, after/before). About 12 minutes. Never changes the
# GPU's settings.
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BEFORE=$(readlink -f "${1:?usage: gpu-before-after.sh BEFORE AFTER [OUT_DIR]}")
AFTER=$(readlink -f "${2:?usage: gpu-before-after.sh BEFORE AFTER [OUT_DIR]}")
OUT_DIR=${3:-${OUT:-out}}
mkdir -p "$OUT_DIR/seed" "$OUT_DIR/layer"
OUT_DIR=$(readlink -f "$OUT_DIR")
LOG=$OUT_DIR/run.log
log() { echo "== $(date -u +%T) $*" | tee -a "$LOG"; }
VRAM=(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0)

# BA_PARTS (default "compare seed layer") runs a subset, e.g. to redo one part.
PARTS=${BA_PARTS:-compare seed layer}
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
has compare && bash scripts/gpu-redesign.sh "$BEFORE" "$AFTER" "$OUT_DIR/compare-demo"

find_opencl_dev
BIN=$(mktemp -d /tmp/before-after.XXXX)
trap 'rm -rf "$BIN"' EXIT
for side in before after; do
  b=$BEFORE; [ $side = after ] && b=$AFTER
  # The library's SONAME is libpinstream.so.0: the program looks for that name beside it.
  mkdir -p "$BIN/$side" && cp "$b/libpinstream_capi.so" "$BIN/$side/libpinstream.so.0"
  cc -std=c11 -O2 -Wall -Icrates/pinstream-capi/include ${CL_INC:+-I"$CL_INC"} examples/c/seed_port.c \
    "$BIN/$side/libpinstream.so.0" "$CL_LIB" -lpthread -Wl,-rpath,"$BIN/$side" -o "$BIN/$side/seed_port" >> "$LOG" 2>&1 \
    || log "the seed port did not build against the $side library (see run.log)"
done
cc -O2 -Wall ${CL_INC:+-I"$CL_INC"} -o "$BIN/classic_recipe" crates/pinstream-layer/c/classic_recipe.c "$CL_LIB" >> "$LOG" 2>&1 \
  || log "classic_recipe did not build (see run.log)"

# timed NAME FILE COMMAND...: output and exit status to FILE, VRAM sampled every 200 ms.
timed() {
  local name=$1 file=$2; shift 2
  log "$name: $*"
  ( while :; do "${VRAM[@]}" 2>/dev/null | head -1; sleep 0.2; done ) > "$BIN/vram" &
  local sampler=$!
  sleep 0.5
  timeout 300 "$@" > "$file" 2>&1
  echo "rc=$?" >> "$file"
  sleep 0.5; kill "$sampler"; wait "$sampler" 2>/dev/null
  echo "vram_before_mib: $(head -1 "$BIN/vram")" >> "$file"
  echo "vram_peak_mib: $(sort -n "$BIN/vram" | tail -1)" >> "$file"
}
SEED=(--total 10GiB --block 256MiB --budget 4GiB --repeat 3)
has seed && for side in before after after before; do
  n=$(ls "$OUT_DIR/seed" | grep -c "^alloc-$side") || true
  timed "seed alloc $side" "$OUT_DIR/seed/alloc-$side-$n.txt" "$BIN/$side/seed_port" "${SEED[@]}"
  timed "seed register $side" "$OUT_DIR/seed/register-$side-$n.txt" "$BIN/$side/seed_port" --register "${SEED[@]}"
done
has layer && for side in before after; do
  b=$BEFORE; [ $side = after ] && b=$AFTER
  timed "layer $side" "$OUT_DIR/layer/classic-$side.txt" env LD_PRELOAD="$b/libpinstream_layer.so" PINSTREAM_LAYER_LOG=1 \
    "$BIN/classic_recipe" --platform NVIDIA --count 10 --size-mib 1024 --repeat 3
done

python3 - "$OUT_DIR" <<'PY' | tee "$OUT_DIR/table.md"
import pathlib, re, sys
out = pathlib.Path(sys.argv[1])
def nums(text):
    """The figures a program printed as `key: number` or `key=number` (the last one wins),
    and the seed port's pin time."""
    figs = {m.group(1): float(m.group(2)) for m in re.finditer(r"\b([a-z][a-z_]*)\s*[:=]\s*\+?([0-9]+(?:\.[0-9]+)?)\b", text)}
    pin = re.search(r"in ([0-9.]+) s \(psHostGetInfo", text)
    if pin:
        figs["pin_s"] = float(pin.group(1))
    return {k: v for k, v in figs.items() if k not in ("pass", "rc", "probe_before", "probe_after")}
def side(pattern):
    files = sorted(out.glob(pattern))
    runs = [nums(f.read_text()) for f in files]
    keys = dict.fromkeys(k for r in runs for k in r)
    return {k: sorted(r[k] for r in runs if k in r) for k in keys}
print("| program | figure | before | after | after/before |")
print("|---|---|---|---|---|")
for name, pat in (("seed port, alloc", "seed/alloc-{}-*.txt"), ("seed port, register", "seed/register-{}-*.txt"), ("layer, classic recipe", "layer/classic-{}.txt")):
    b, a = side(pat.format("before")), side(pat.format("after"))
    for k in dict.fromkeys(list(b) + list(a)):
        bv, av = b.get(k, []), a.get(k, [])
        med = lambda v: v[len(v) // 2] if v else None
        r = f"{med(av) / med(bv):.3f}" if bv and av and med(bv) else "-"
        print(f"| {name} | {k} | {', '.join(map(str, bv)) or '-'} | {', '.join(map(str, av)) or '-'} | {r} |")
PY
