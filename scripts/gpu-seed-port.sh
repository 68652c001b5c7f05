#!/usr/bin/env bash
# The seed port on the H200: the OpenCL port (examples/c/seed_port.c, through libpinstream)
# against its CUDA original (examples/cuda/seed_port.cu), and seed_stream (the port with its
# loop replaced by psStreamRun, examples/c/seed_stream.c) against the port, both modes, at the seed's sizes
# (10 GiB pinned, 256 MiB blocks, 4 GiB of device buffers), with VRAM read by NVML (the port's
# psHostGetInfo) and by nvidia-smi (samples every 100 ms during each run).
#
# Here (Rust machine):   scripts/install-capi.sh gpu-capi     (release build, git-ignored)
# On the GPU machine:    bash scripts/gpu-seed-port.sh gpu-capi "$OUT"      (carry: gpu-capi)
#
# Needs the system C compiler and nvcc there (no Rust). Writes into OUT/seed-port/: each run's
# raw output (opencl-alloc.txt, cuda-alloc.txt, stream-alloc.txt and the same for register), its
# nvidia-smi samples (*.vram.csv), machine.txt, build.log and table.md (the figures and the
# goals: OpenCL/CUDA combined throughput >= 0.99, VRAM cost of the 10 GiB <= 32 MiB, every
# check passing; seed_stream/seed_port >= 0.99, issue 37). Never changes the GPU's settings. Exit code 0 only when every goal is met.
set -u
. "$(dirname "$0")/gpu-common.sh"
CAPI=$(cd "${1:-gpu-capi}" && pwd)
OUT_DIR=${2:-${OUT:-out}}/seed-port
ARGS=${SEED_PORT_ARGS:---total 10GiB --block 256MiB --budget 4GiB --repeat 5}
mkdir -p "$OUT_DIR"
BIN=$(mktemp -d /tmp/seed-port.XXXX)
trap 'rm -rf "$BIN"' EXIT
log() { echo "== $*" | tee -a "$OUT_DIR/build.log"; }

register_nvidia_icd
{ date -u; uname -a; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,pcie.link.gen.current,pcie.link.width.current --format=csv; nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo; nvcc --version | tail -2; cc --version | head -1; echo "args: $ARGS"; } > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"

# OpenCL headers and loader: the system's if installed, else the CUDA toolkit's.
find_opencl_dev
log "OpenCL headers: ${CL_INC:-none found} ; loader: ${CL_LIB:-none found}"
log "build: cc seed_port.c against $CAPI/lib, nvcc seed_port.cu"
# The library's links, made here (a carried folder may lose symbolic links on the way).
REAL=$(ls "$CAPI"/lib/libpinstream.so.*.*.* | head -1)
mkdir -p "$BIN/lib" && ln -sf "$REAL" "$BIN/lib/libpinstream.so.0" && ln -sf "$REAL" "$BIN/lib/libpinstream.so"
cc -std=c11 -O2 -Wall -I"$CAPI/include" ${CL_INC:+-I"$CL_INC"} examples/c/seed_port.c \
  -L"$BIN/lib" -lpinstream "$CL_LIB" -lpthread -Wl,-rpath,"$BIN/lib" -o "$BIN/seed_port" >> "$OUT_DIR/build.log" 2>&1 \
  || { log "the C port did not build (see build.log)"; exit 1; }
cc -std=c11 -O2 -Wall -I"$CAPI/include" ${CL_INC:+-I"$CL_INC"} examples/c/seed_stream.c \
  -L"$BIN/lib" -lpinstream "$CL_LIB" -lpthread -Wl,-rpath,"$BIN/lib" -o "$BIN/seed_stream" >> "$OUT_DIR/build.log" 2>&1 \
  || { log "seed_stream did not build (see build.log)"; exit 1; }
nvcc -O2 -arch=native -o "$BIN/seed_port_cuda" examples/cuda/seed_port.cu >> "$OUT_DIR/build.log" 2>&1 \
  || nvcc -O2 -o "$BIN/seed_port_cuda" examples/cuda/seed_port.cu >> "$OUT_DIR/build.log" 2>&1 \
  || { log "the CUDA port did not build (see build.log)"; exit 1; }
ldd "$BIN/seed_port" >> "$OUT_DIR/build.log" 2>&1

# The device VM grows its RAM on first use: touch once, so pin times measure pinning.
warm_vm_memory 24 10 2>&1 | tee -a "$OUT_DIR/build.log"

# run NAME PROGRAM ARGS...: the program's output and nvidia-smi samples during it.
run() {
  local name=$1; shift
  log "$name: $*"
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 100 > "$OUT_DIR/$name.vram.csv" 2>/dev/null &
  local smi=$!
  sleep 1
  "$@" > "$OUT_DIR/$name.txt" 2>&1
  echo "rc=$?" >> "$OUT_DIR/$name.txt"
  sleep 1
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  cat "$OUT_DIR/$name.txt"
}
# shellcheck disable=SC2086
{
  run opencl-alloc "$BIN/seed_port" $ARGS
  run cuda-alloc "$BIN/seed_port_cuda" $ARGS
  run opencl-register "$BIN/seed_port" --register $ARGS
  run cuda-register "$BIN/seed_port_cuda" --register $ARGS
  run stream-alloc "$BIN/seed_stream" $ARGS
  run stream-register "$BIN/seed_stream" --register $ARGS
}

python3 - "$OUT_DIR" <<'PY'
import re, sys, pathlib
out = pathlib.Path(sys.argv[1])
def figures(name):
    text = (out / f"{name}.txt").read_text()
    get = lambda pat, cast=float: (lambda m: cast(m.group(1)) if m else None)(re.search(pat, text))
    vram = [int(l.split(",")[1]) for l in (out / f"{name}.vram.csv").read_text().splitlines() if l.count(",") == 1 and l.split(",")[1].strip().isdigit()]
    return {
        "best": get(r"best_combined_gbps=([\d.]+)"),
        "combined": [float(x) for x in re.findall(r"combined ([\d.]+) GB/s", text)],
        "pass": "mismatches=0 PASS" in text and "rc=0" in text,
        "pin_s": get(r"pinned: .* in ([\d.]+) s"),
        "vram_pin_mib": get(r"vram cost: ([+-][\d.]+) MiB"),
        "vram_note": get(r"vram cost: (.*)", str),
        "smi_peak_mib": (max(vram) - vram[0]) if vram else None,
    }
rows, goals = [], []
for mode in ("alloc", "register"):
    cl, cu = figures(f"opencl-{mode}"), figures(f"cuda-{mode}")
    ratio = cl["best"] / cu["best"] if cl["best"] and cu["best"] else None
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None
    mratio = med(cl["combined"]) / med(cu["combined"]) if cl["combined"] and cu["combined"] else None
    for api, f in (("OpenCL + pinstream", cl), ("CUDA", cu)):
        rows.append(f"| {mode} | {api} | {f['best']} | {med(f['combined'])} | {'PASS' if f['pass'] else 'FAIL'} | {f['pin_s']} | {f['vram_pin_mib'] if f['vram_pin_mib'] is not None else '-'} | {f['smi_peak_mib']} |")
    rows.append(f"| {mode} | **OpenCL/CUDA** | **{ratio:.3f}** (best) | **{mratio:.3f}** (median) | | | | |" if ratio and mratio else f"| {mode} | OpenCL/CUDA | n/a | | | | | |")
    goals.append((f"{mode}: OpenCL/CUDA combined throughput >= 0.99 (best of passes)", ratio is not None and ratio >= 0.99, f"{ratio:.3f}" if ratio else "n/a"))
    goals.append((f"{mode}: VRAM cost of the pinned memory <= 32 MiB (NVML, psHostGetInfo)", cl["vram_pin_mib"] is not None and cl["vram_pin_mib"] <= 32, f"{cl['vram_pin_mib']} MiB ({cl['vram_note']})"))
    goals.append((f"{mode}: both ports' checks pass", cl["pass"] and cu["pass"], f"OpenCL {'PASS' if cl['pass'] else 'FAIL'}, CUDA {'PASS' if cu['pass'] else 'FAIL'}"))
    st = figures(f"stream-{mode}")
    sratio = st["best"] / cl["best"] if st["best"] and cl["best"] else None
    rows.append(f"| {mode} | seed_stream (psStreamRun) | {st['best']} | {med(st['combined'])} | {'PASS' if st['pass'] else 'FAIL'} | {st['pin_s']} | | {st['smi_peak_mib']} |")
    goals.append((f"{mode}: seed_stream/seed_port combined throughput >= 0.99 (best of passes)", sratio is not None and sratio >= 0.99 and st["pass"], f"{sratio:.3f}" if sratio else "n/a"))
table = ["| mode | API | best combined GB/s | median combined GB/s | checks | pin time s | VRAM cost of the pin, MiB (NVML) | nvidia-smi peak above start, MiB (pin + 4 GiB of blocks + context) |", "|---|---|---|---|---|---|---|---|", *rows, "", "| goal | met | figure |", "|---|---|---|"]
table += [f"| {g} | {'yes' if ok else '**NO**'} | {fig} |" for g, ok, fig in goals]
(out / "table.md").write_text("\n".join(table) + "\n")
print("\n".join(table))
sys.exit(0 if all(ok for _, ok, _ in goals) else 1)
PY
exit $?
