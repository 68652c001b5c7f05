#!/usr/bin/env bash
# Issue 36's storage goal on the GPU machine: a file larger than the memory cgroup it runs in,
# streamed from the disk in place over several passes (`run --from-storage on --passes N`).
#   1. writes SIZE_GIB of uint32 (each element its index) to the machine's disk;
#   2. makes a child memory cgroup of LIMIT_GIB (cgroup v2, root) and runs, inside it, the
#      seed's kernel (examples/seed.cl) over the file, result in a second file:
#        tier    --residency off: pinned host memory and storage only (the goal's shape:
#                passes 2..N read only what host memory does not hold; the disk bounds a pass)
#        tiers   --residency auto --vram-budget 4GiB: the three tiers, VRAM too
#   3. checks each result against the CPU (N applications of the kernel, every element) and
#      writes OUT_DIR/storage-passes.md: bytes per tier, bytes read per pass, each later pass's
#      time against the floor the report names, the bound, the cgroup's peak.
# Defaults: 12 GiB in an 8 GiB cgroup, 3 passes (the goal). About 2 minutes on the GPU
# machine's disk (~1.9 GB/s); each shape stops after 240 s.
#   scripts/gpu-storage-passes.sh BUNDLE OUT_DIR [SIZE_GIB] [LIMIT_GIB] [PASSES]
# Never changes the GPU's settings; removes its files and its cgroup on every path.
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
P=$(readlink -f "${1:?usage: gpu-storage-passes.sh BUNDLE OUT_DIR [SIZE_GIB] [LIMIT_GIB] [PASSES]}")/pinstream
OUT_DIR=$(mkdir -p "${2:?OUT_DIR}" && readlink -f "$2")
GIB=${3:-12}; LIMIT=${4:-8}; PASSES=${5:-3}
LIMIT_BYTES=$(python3 -c "print(int(float('$LIMIT') * 2**30))")
KERNEL=$(readlink -f examples/seed.cl)
# A folder of its own (STORAGE_DIR picks the file system), removed at the end.
DIR=$(mktemp -d "${STORAGE_DIR:-/tmp}/ps-storage-passes.XXXXXX") || exit 1
CG=
# Stops what runs in the cgroup (v2: cgroup.kill; v1: each process), then removes it; says so
# where it cannot.
drop_cgroup() {
  [ -n "$CG" ] && [ -d "$CG" ] || return 0
  if [ -e "$CG/cgroup.kill" ]; then echo 1 > "$CG/cgroup.kill"; else xargs -r kill -9 < "$CG/cgroup.procs"; fi
  for _ in $(seq 50); do [ -s "$CG/cgroup.procs" ] || break; sleep 0.1; done
  rmdir "$CG" || echo "could not remove the cgroup $CG" >&2
}
cleanup() { drop_cgroup; rm -rf "$DIR"; }
trap cleanup EXIT
trap 'exit 143' TERM INT HUP
register_nvidia_icd
{ date -u; cat "$(dirname "$P")/COMMIT" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo; df -h /tmp | tail -1; echo "size ${GIB} GiB, cgroup ${LIMIT} GiB, passes $PASSES"; } > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"
mkdir -p "$DIR"
python3 - "$DIR/input.bin" "$GIB" <<'PY' || exit 1
import sys, numpy as np
path, gib = sys.argv[1], float(sys.argv[2])
n, chunk = int(gib * 2**28), 1 << 26
with open(path, "wb") as f:
    for s in range(0, n, chunk):
        np.arange(s, min(s + chunk, n), dtype=np.uint64).astype(np.uint32).tofile(f)
PY
sync
# A child memory cgroup: cgroup v2 (memory.max, memory.peak) or v1's memory hierarchy.
if grep -qsw memory /sys/fs/cgroup/cgroup.controllers; then
  echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
  CG=/sys/fs/cgroup/pinstream-storage-passes-$$; MAX=memory.max; PEAK=memory.peak
elif [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  CG=/sys/fs/cgroup/memory/pinstream-storage-passes-$$; MAX=memory.limit_in_bytes; PEAK=memory.max_usage_in_bytes
else
  echo "no memory cgroup here (neither v2 with memory nor v1's hierarchy): the goal needs one" | tee "$OUT_DIR/storage-passes.md"; exit 1
fi
new_cgroup() { mkdir "$CG" && echo "$LIMIT_BYTES" > "$CG/$MAX"; }
new_cgroup || { echo "cannot make a cgroup at $CG" | tee "$OUT_DIR/storage-passes.md"; exit 1; }
rc=0
for shape in tier tiers; do
  case $shape in
    tier) extra=(--residency off) ;;
    tiers) extra=(--residency auto --vram-budget 4GiB) ;;
  esac
  echo "== $shape: ${extra[*]}"
  # The shell moves itself into the cgroup, then runs pinstream there.
  sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG" \
    timeout 240 "$P" run --from-storage on --kernel "$KERNEL" --entry seed --dtype u32 \
    --input "$DIR/input.bin" --output "$DIR/output.bin" --passes "$PASSES" "${extra[@]}" --json \
    > "$OUT_DIR/$shape.json" 2> "$OUT_DIR/$shape.err"
  r=$?
  peak=$(cat "$CG/$PEAK" 2>/dev/null || echo "-")
  echo "rc=$r peak=$peak" | tee "$OUT_DIR/$shape.rc"
  if [ $r != 0 ]; then
    rc=1; tail -5 "$OUT_DIR/$shape.err"
  else
  python3 - "$DIR/input.bin" "$DIR/output.bin" "$PASSES" > "$OUT_DIR/$shape.check" 2>&1 <<'PY' || rc=1
import sys, numpy as np
src, dst, passes = sys.argv[1], sys.argv[2], int(sys.argv[3])
a, b = np.memmap(src, np.uint32, "r"), np.memmap(dst, np.uint32, "r")
assert a.size == b.size, (a.size, b.size)
off, chunk = 0, 1 << 26
for s in range(0, a.size, chunk):
    x = np.array(a[s:s + chunk])
    for _ in range(passes):
        x = x * np.uint32(2654435761) + np.uint32(12345)
    off += int(np.count_nonzero(x != b[s:s + chunk]))
print(f"checked {a.size} elements, {off} off")
sys.exit(1 if off else 0)
PY
    cat "$OUT_DIR/$shape.check"
  fi
  rm -f "$DIR/output.bin"
  # A new cgroup per shape, so each peak is its own (memory.peak covers a cgroup's life).
  drop_cgroup
  new_cgroup || { echo "cannot make a cgroup at $CG" >&2; exit 1; }
done
python3 - "$OUT_DIR" "$GIB" "$LIMIT" > "$OUT_DIR/storage-passes.md" <<'PY' || rc=1
import json, os, sys
out, gib, limit = sys.argv[1], sys.argv[2], sys.argv[3]
G = 2**30
print(f"{gib} GiB in place from the disk inside a {limit} GiB memory cgroup, the seed's kernel.\n")
print("| shape | checked | VRAM tier GiB | host tier GiB | storage GiB | read per pass GiB | host tier per pass GiB | written per pass GiB | later passes s | floor s (bound) | later / floor | each pass's own floor s | later / own floor | cgroup peak GiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for shape in ("tier", "tiers"):
    try:
        r = json.load(open(os.path.join(out, f"{shape}.json")))
    except Exception as e:
        print(f"| {shape} | no report: {e} |"); continue
    st = r["storage"]; plan = st.get("plan", {}); fl = plan.get("floor") or {}
    chk = open(os.path.join(out, f"{shape}.check")).read().strip() if os.path.exists(os.path.join(out, f"{shape}.check")) else "-"
    peak = open(os.path.join(out, f"{shape}.rc")).read().split("peak=")[1].strip()
    floor = max(fl.get("storage_s", 0), fl.get("storage_write_s", 0), fl.get("h2d_s", 0), fl.get("d2h_s", 0)) if fl else None
    later = fl.get("measured_s", [])
    ratio = ", ".join(f"{m / floor:.3f}" for m in later) if floor else "-"
    own = fl.get("pass_floor_s", [])
    own_ratio = ", ".join(f"{m / o:.3f}" if o > 0 else "-" for m, o in zip(later, own)) or "-"
    f = lambda v: f"{v / G:.2f}"
    print(f"| {shape} | {chk} | {f(plan.get('vram_bytes', 0))} | {f(plan.get('host_bytes', 0))} | {f(plan.get('storage_bytes', 0))} "
          f"| {', '.join(f(b) for b in st.get('pass_read_bytes', []))} | {', '.join(f(b) for b in st.get('pass_host_bytes', []))} "
          f"| {', '.join(f(b) for b in st.get('pass_written_bytes', [])) or '-'} "
          f"| {', '.join(f'{m:.3f}' for m in later)} | {floor if floor is None else round(floor, 3)} ({fl.get('bound', plan.get('bound'))}) | {ratio} "
          f"| {', '.join(f'{o:.3f}' for o in own) or '-'} | {own_ratio} "
          f"| {peak if peak == '-' else f(int(peak))} |")
PY
cat "$OUT_DIR/storage-passes.md"
exit $rc
