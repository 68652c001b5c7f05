#!/usr/bin/env bash
# Issue 16's before/after on the GPU machine: the same `compare` and `demo` with the binary
# built before the redesign (commit d778dd6) and with the redesigned one, back to back on one
# machine, then a before/after table. Bars: compare OpenCL/CUDA >= 0.99 for transfers and
# streams, demo >= 97 GB/s combined (in place), both after as before.
#
#   scripts/build-gpu-bundle.sh gpu-bundle-before d778dd6   # here, before the GPU run
#   NO_TESTS=1 scripts/build-gpu-bundle.sh gpu-bundle-after
#   scripts/gpu-redesign.sh gpu-bundle-before gpu-bundle-after [OUT_DIR]   # on the GPU machine
#
# (carry gpu-bundle-before and gpu-bundle-after). OUT_DIR (default $OUT, else out/) receives
# compare-{before,after}.json (and compare-{before,after}-rK.json for REDESIGN_ROUNDS, below),
# demo-{before,after}.json, run.log (every command, its stderr and exit status) and table.txt
# (the table printed at the end). About 3 to 5 minutes of GPU time for one round: 40 GiB of VM
# memory warmed once, then compare (10 GiB, 4 GiB budget, 3 repeats, ~55 s) before then after,
# and demo (10 GiB per workload, ~10 s) after then before, so slow drift of the machine falls
# on both. Each further round adds two compares, about 110 s: REDESIGN_ROUNDS=3 takes about
# 400 s, near the device tool's 600 s per command. Never changes the GPU's settings.
set -u
. "$(dirname "$0")/gpu-common.sh"
BEFORE=${1:?usage: gpu-redesign.sh BEFORE_BUNDLE AFTER_BUNDLE [OUT_DIR]}
AFTER=${2:?usage: gpu-redesign.sh BEFORE_BUNDLE AFTER_BUNDLE [OUT_DIR]}
OUT_DIR=${3:-${OUT:-out}}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/run.log
log() { echo "== $(date -u +%T) $*" | tee -a "$LOG"; }
# step NAME BUNDLE ARGS...: the JSON report to NAME.json, stderr and the exit status to the log.
step() {
  local name=$1 bundle=$2; shift 2
  log "$name: $bundle/pinstream $*"
  "$bundle/pinstream" "$@" > "$OUT_DIR/$name.json" 2>> "$LOG"
  echo "rc=$? ($name)" | tee -a "$LOG"
}
for b in "$BEFORE" "$AFTER"; do
  [ -x "$b/pinstream" ] || { echo "no $b/pinstream: build it with scripts/build-gpu-bundle.sh" >&2; exit 2; }
  log "$b: $(cat "$b/COMMIT" 2>/dev/null | head -1)"
done
register_nvidia_icd
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv; nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo; } >> "$LOG" 2>&1
log "warming the VM's memory (${REDESIGN_WARM_GIB:-40} GiB once)"
warm_vm_memory "${REDESIGN_WARM_GIB:-40}" 15
# The sizes can be made small to try the script on another machine (never for the record):
# REDESIGN_SIZE, REDESIGN_BUDGET, REDESIGN_DEMO (extra demo arguments), REDESIGN_WARM_GIB.
COMPARE=(compare --size "${REDESIGN_SIZE:-10GiB}" --vram-budget "${REDESIGN_BUDGET:-4GiB}" --repeat 3 --json)
read -r -a DEMO <<< "demo --json ${REDESIGN_DEMO:-}"
step compare-before "$BEFORE" "${COMPARE[@]}"
step compare-after "$AFTER" "${COMPARE[@]}"
step demo-after "$AFTER" "${DEMO[@]}"
step demo-before "$BEFORE" "${DEMO[@]}"
# REDESIGN_ROUNDS=N (default 1): N-1 more compare pairs, the order turning each round (after
# then before on even rounds), as compare-{before,after}-rK.json; the table gives each
# figure's ratio to CUDA per round and its median over the rounds, so one run's noise (a
# single paired ratio moved 1.8% in session-2026-12-07b) is not read as a loss.
for k in $(seq 2 "${REDESIGN_ROUNDS:-1}"); do
  if [ $((k % 2)) = 0 ]; then
    step "compare-after-r$k" "$AFTER" "${COMPARE[@]}"; step "compare-before-r$k" "$BEFORE" "${COMPARE[@]}"
  else
    step "compare-before-r$k" "$BEFORE" "${COMPARE[@]}"; step "compare-after-r$k" "$AFTER" "${COMPARE[@]}"
  fi
done
log "table"
python3 - "$OUT_DIR" <<'PY' | tee "$OUT_DIR/table.txt"
import json, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(f"{out}/{name}.json"))
    except Exception as e:
        print(f"{name}: no report ({e})")
        return None
cb, ca = load("compare-before"), load("compare-after")
def med(v):
    v = sorted(v)
    return (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2 if v else None
def figures(half):
    """(figure, GB/s) of one API's half of a compare report, medians."""
    out = []
    for size, h2d, d2h, both in (half or {}).get("bench", []):
        for what, v in (("H2D", h2d), ("D2H", d2h), ("both ways", both)):
            out.append((f"{what}, {size >> 20} MiB blocks", v))
    out.append(("in-place stream, up + down", med((half or {}).get("in_place", []))))
    out.append(("y = W·x, weights", med((half or {}).get("gemv", []))))
    return out
def halves(rep):
    cl = dict(figures((rep or {}).get("opencl")))
    cu = (rep or {}).get("cuda", {})
    return cl, dict(figures(cu.get("half"))) if cu.get("status") == "measured" else {}
(bcl, bcu), (acl, acu) = halves(cb), halves(ca)
f = lambda x: f"{x:7.1f}" if x is not None else f"{'-':>7}"
r = lambda a, b: f"{a / b:6.3f}" if a is not None and b else f"{'-':>6}"
print(f"{'compare, GB/s (medians)':28} {'OpenCL':>7} {'CUDA':>7} {'CL/CUDA':>7} | {'OpenCL':>7} {'CUDA':>7} {'CL/CUDA':>7}  bar (after)")
print(f"{'':28} {'before':^23} | {'after':^23}")
for fig in dict.fromkeys(list(bcl) + list(acl)):
    b1, b2, a1, a2 = bcl.get(fig), bcu.get(fig), acl.get(fig), acu.get(fig)
    bar = "" if a2 is None else ("ok" if a1 / a2 >= 0.99 else "BELOW 0.99")
    print(f"{fig:28} {f(b1)} {f(b2)} {r(b1, b2):>7} | {f(a1)} {f(a2)} {r(a1, a2):>7}  {bar}")
for tag, rep in (("before", cb), ("after", ca)):
    cu = (rep or {}).get("cuda", {})
    if cu.get("status") != "measured":
        print(f"{tag}: CUDA not measured: {cu.get('reason')}")
db, da = load("demo-before"), load("demo-after")
def demo(rep, name, key):
    for w in (rep or {}).get("workloads", []):
        if w["name"] == name:
            t = w["stream"]["totals"]
            return t["combined_gbps"] if key == "combined" else t["upload"]["gbps"], w["mismatches"]
    return None, None
print()
print(f"{'demo figure':40} {'before':>8} {'after':>8}  bar")
for name, key, label in (("in-place", "combined", "in place, upload + download GB/s"), ("gemv", "upload", "y = W·x, weights GB/s")):
    (b, bm), (a, am) = demo(db, name, key), demo(da, name, key)
    bar = "" if key != "combined" else ("ok" if a is not None and a >= 97 else "BELOW 97")
    f = lambda x: f"{x:8.1f}" if x is not None else f"{'-':>8}"
    print(f"{label:40} {f(b)} {f(a)}  {bar}  (mismatches before {bm}, after {am})")
# Every round's ratios (compare's own: ratio of medians, and paired), and their medians.
import glob, os, statistics
rounds = {}
for tag in ("before", "after"):
    for p in sorted(glob.glob(f"{out}/compare-{tag}*.json")):
        try:
            rep = json.load(open(p))
        except Exception:
            print(f"{os.path.basename(p)}: no report (a failed round: its cells are missing below)")
            continue
        k = int(os.path.basename(p)[len(f"compare-{tag}"):-5].removeprefix("-r") or 1)
        for x in rep.get("ratios", []):
            # An older report may lack "paired": its cell then shows the ratio alone.
            rounds.setdefault(x["figure"], {}).setdefault(tag, {})[k] = (x["ratio"], x.get("paired"))
if any(len(v.get("after", {})) > 1 for v in rounds.values()):
    print()
    print("ratio to CUDA per round (ratio of medians / paired); median over the rounds, after / before")
    for fig, by in rounds.items():
        cells = []
        for tag in ("before", "after"):
            each = by.get(tag, {})
            cells.append(" ".join(f"r{k}:{a:.3f}/" + (f"{p:.3f}" if p is not None else "-")
                                  for k, (a, p) in sorted(each.items())))
        def over_rounds(tag, i):
            xs = [x[i] for x in by.get(tag, {}).values() if x[i] is not None]
            return statistics.median(xs) if xs else None
        mb, ma, pb, pa = (over_rounds(t, i) for t, i in (("before", 0), ("after", 0), ("before", 1), ("after", 1)))
        medians = f"medians {mb:.3f} -> {ma:.3f} ({ma / mb:.3f})" if mb and ma else "medians -"
        paired = f"paired {pb:.3f} -> {pa:.3f} ({pa / pb:.3f})" if pb and pa else "paired -"
        print(f"{fig}: before {cells[0]} | after {cells[1]} | over the rounds: {medians}, {paired}")
PY
log "done"
