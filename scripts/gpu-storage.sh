#!/usr/bin/env bash
# Issue 25 on the GPU machine (~2 minutes): data streamed from storage through the pinned ring.
# For a file on the machine's disk (virtio) and one in /dev/shm (a faster source):
#  - `bench storage FILE`: in one run the file's raw direct-read speed, pinstream's
#    storage -> device chain over the same file, and two baselines of buffered reads into
#    pageable memory, uploaded from there: blocks in file order (the kernel's readahead
#    follows the reads) and a page per read with POSIX_FADV_RANDOM, the blocks in a shuffled
#    order (no readahead: each read fetches its page, as a fault of a mapped file under
#    MADV_RANDOM does; 1 GiB at most). (Until 2026-12-05 these were mmap + pageable copies;
#    a file truncated meanwhile killed the bench with SIGBUS: docs/storage.md.)
#  - `run --from-storage on` over the file (a kernel in place, the result written to a second
#    file), with the process's peak resident memory (getrusage) beside the staging the report
#    says it held.
# Raw outputs under OUT_DIR, the goals in OUT_DIR/storage.md.
#   scripts/gpu-storage.sh [BIN_DIR] [OUT_DIR] [SIZE_GIB]
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=$(readlink -f "${1:-gpu-bundle}"); OUT_DIR=${2:-${OUT:-out}}; GIB=${3:-4}
P=$BIN_DIR/pinstream
KERNEL=$(readlink -f "$(dirname "$0")/../examples/scale.cl")
mkdir -p "$OUT_DIR"
register_nvidia_icd

# Runs ARGS, its output in OUT_DIR/NAME.txt with its exit code and peak resident memory last.
measured() {
  local name=$1; shift
  python3 - "$OUT_DIR/$name.txt" "$@" <<'PY'
import resource, subprocess, sys
out, cmd = sys.argv[1], sys.argv[2:]
with open(out, "w") as f:
    rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    f.write(f"rc={rc}\npeak_rss_bytes={peak}\n")
PY
  tail -n 20 "$OUT_DIR/$name.txt"
}

for where in disk shm; do
  case $where in
    disk) dir=/tmp/ps-storage ;;
    shm) dir=/dev/shm/ps-storage ;;
  esac
  mkdir -p "$dir"
  f=$dir/input.bin
  # Real blocks on the device (not a sparse or preallocated file, whose reads cost nothing).
  dd if=/dev/zero of="$f" bs=16M count=$((GIB * 64)) oflag=direct status=none 2>/dev/null \
    || dd if=/dev/zero of="$f" bs=16M count=$((GIB * 64)) status=none
  sync
  df -h "$dir" > "$OUT_DIR/$where-df.txt"
  measured "$where-bench" "$P" bench storage "$f" --save "$OUT_DIR/$where-bench.json"
  measured "$where-run" "$P" run --from-storage on --kernel "$KERNEL" --entry scale \
    --arg factor=2 --dtype f32 --input "$f" --output "$dir/output.bin" --json
  rm -rf "$dir"
done

python3 - "$OUT_DIR" <<'PY' > "$OUT_DIR/storage.md" 2>&1
import json, os, re, sys
out = sys.argv[1]
print("reads in file order: buffered reads + pageable copies, blocks in file order (the kernel's readahead follows the reads).")
print("page reads, FADV_RANDOM: buffered reads of one page each + pageable copies, POSIX_FADV_RANDOM and the blocks in a shuffled order (no readahead: each read fetches its page, as a fault of a mapped file under MADV_RANDOM does; 1 GiB at most).")
print("The goal is >= 3x the common way (mmap + pageable copies; the same requests to the disk: docs/storage.md); both baselines are printed, neither is chosen here.\n")
print("| source | raw direct read GB/s | pinstream chain GB/s | chain / raw (goal >= 0.95) | reads in file order GB/s | chain / it | page reads, FADV_RANDOM GB/s | chain / it | run: storage GB/s | run: peak RSS | run: staging | RSS / staging (goal <= 1.10) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for where in ("disk", "shm"):
    try:
        b = json.load(open(os.path.join(out, f"{where}-bench.json")))
    except Exception as e:
        print(f"| {where} | no bench report: {e} |"); continue
    text = open(os.path.join(out, f"{where}-run.txt")).read()
    peak = int(re.search(r"peak_rss_bytes=(\d+)", text).group(1))
    body = text[: text.rfind("rc=")]
    try:
        r = json.loads(body[body.index("{"):])
    except Exception as e:
        print(f"| {where} | {json.dumps(b)[:300]} | run report unreadable: {e} |"); continue
    st = r.get("storage", {})
    def g(d, *keys):
        for k in keys:
            if isinstance(d, dict) and k in d:
                return d[k]
        return None
    raw, chain, mm = g(b, "direct_read_gbps"), g(b, "chain_gbps"), g(b, "baseline_gbps")
    rnd = g(b, "random_baseline_gbps")
    staging = g(st, "staging_bytes")
    fmt = lambda v, s: "-" if v is None else s.format(v)
    print(f"| {where} | {fmt(raw, '{:.2f}')} | {fmt(chain, '{:.2f}')} | {fmt(chain / raw if raw and chain else None, '{:.3f}')} | {fmt(mm, '{:.2f}')} | {fmt(chain / mm if mm and chain else None, '{:.1f}x')} | {fmt(rnd, '{:.3f}')} | {fmt(chain / rnd if rnd and chain else None, '{:.1f}x')} | {fmt(g(st, 'read_gbps'), '{:.2f}')} | {peak / 2**20:.0f} MiB | {fmt(staging / 2**20 if staging else None, '{:.0f} MiB')} | {fmt(peak / staging if staging else None, '{:.2f}')} |")
    print(f"\n{where}: bench report keys {sorted(b)[:20]}; run storage {json.dumps(st)[:400]}\n")
PY
cat "$OUT_DIR/storage.md"
