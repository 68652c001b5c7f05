#!/usr/bin/env bash
# Issue 14's proof on the two-GPU machine (kind nvidia-h200-x2), in one go, about 3 minutes:
#   1. in place (examples/scale.cl / scale.cu), 10 GiB per GPU through a 4 GiB budget each:
#      one GPU (10 GiB) against two (20 GiB, --devices all); goal: aggregate >= 1.9x;
#   2. y = W·x (examples/gemv_f16.cl / .cu) over 20 GiB of f16 weights: one GPU against two;
#      goal: weight rate >= 1.9x;
#   3. every figure through OpenCL and through CUDA (`run --api cuda`, the same engine over
#      the same devices), paired run by run; goal: OpenCL/CUDA >= 0.97 per device and in total;
#   4. with several NUMA nodes: the two-GPU in-place run with --numa on and off;
#   5. `compare --devices all` (both workloads over both GPUs, OpenCL and CUDA paired, the
#      ratio per device and in total);
#   6. `bench devices --devices all --api both`: every block size on both GPUs at once beside GPU 0
#      alone, OpenCL and CUDA;
#   7. the link probe (scripts/multi-link-probe.cu, nvcc there): plain cudaMemcpyAsync from
#      cudaMallocHost memory on 1 and 2 GPUs per direction, and the host's memcpy bandwidth:
#      what the machine allows with no pinstream in the way.
#   scripts/gpu-multi.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR: scripts/build-gpu-bundle.sh's output (NO_TESTS=1 is enough). REPEAT (default 2)
# runs of each. Raw JSON per run under OUT_DIR/raw/, the table in OUT_DIR/table.txt, printed
# last. Never changes the GPU's settings.
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}; OUT_DIR=${2:-${OUT:-out}}
HERE=$(cd "$(dirname "$0")/.." && pwd)
P=$BIN_DIR/pinstream
REPEAT=${REPEAT:-2}
COLS=8192
# Sizes (the issue's goals by default; smaller ones try the script on PoCL:
# SIZE=64MiB GEMV_SIZE=64MiB BUDGET=16MiB BLOCK=4MiB WARM=0).
SIZE=${SIZE:-10GiB}; SIZE2=${SIZE2:-$(echo "$SIZE" | awk '{ match($0, /^[0-9]+/); print 2 * substr($0, 1, RLENGTH) substr($0, RLENGTH + 1) }')}
GEMV_SIZE=${GEMV_SIZE:-20GiB}; BUDGET=${BUDGET:-4GiB}; BLOCK=${BLOCK:-256MiB}; WARM=${WARM:-48}
mkdir -p "$OUT_DIR/raw"
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT_DIR/run.log"; }
# CUDA numbers devices fastest first by default; OpenCL lists them in PCI order.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
register_nvidia_icd
{
  date -u; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
  nvidia-smi topo -m
  nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo
  echo "NUMA nodes online: $(cat /sys/devices/system/node/online 2>/dev/null || echo unknown)"
  for n in /sys/devices/system/node/node*; do [ -e "$n/cpulist" ] && echo "$(basename "$n"): cpus $(cat "$n/cpulist")"; done
  for g in $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader); do
    a=$(echo "$g" | tr 'A-Z' 'a-z' | sed 's/^0000\(....:\)/\1/')
    echo "GPU $g: numa_node $(cat /sys/bus/pci/devices/$a/numa_node 2>/dev/null || echo unknown)"
  done
} > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"
"$P" devices > "$OUT_DIR/devices.txt" 2>&1
NODES=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
if [ "$WARM" -gt 0 ]; then log "warming the VM's memory ($WARM GiB once)"; warm_vm_memory "$WARM" 10; fi
# The machine's own limits first (no pinstream): CUDA copies on 1 and 2 GPUs, host memcpy.
if [ "${PROBE:-1}" = 1 ]; then
  log "link probe: cudaMemcpyAsync on 1 and 2 GPUs, host memcpy"
  probe=$(mktemp -d)/probe
  if nvcc -O2 -o "$probe" "$HERE/scripts/multi-link-probe.cu" > "$OUT_DIR/raw/link-probe.build" 2>&1; then
    "$probe" "${PROBE_GIB:-2}" 5 > "$OUT_DIR/raw/link-probe.jsonl" 2> "$OUT_DIR/raw/link-probe.err"
    echo "rc=$?" >> "$OUT_DIR/raw/link-probe.err"
  else
    log "link probe: nvcc failed (raw/link-probe.build)"
  fi
fi
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<%df' % $COLS, *[((i * 7) % 13) / 13.0 for i in range($COLS)]))" > "$OUT_DIR/x.f32"

# one NAME API ARGS...: a run with --json into raw/NAME.json (stderr into raw/NAME.err).
one() {
  local name=$1 api=$2; shift 2
  log "$name: $*"
  "$P" run --api "$api" --json "$@" > "$OUT_DIR/raw/$name.json" 2> "$OUT_DIR/raw/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { echo "rc=$rc"; tail -n 5 "$OUT_DIR/raw/$name.err"; }
}
kernel() { echo "$HERE/examples/$1.$([ "$2" = cuda ] && echo cu || echo cl)"; }
in_place() { # in_place API GPUS SIZE [EXTRA...]
  local api=$1 gpus=$2 size=$3; shift 3
  local devs=(); [ "$gpus" = 2 ] && devs=(--devices all)
  one "inplace-$api-${gpus}gpu$SUFFIX-r$r" "$api" --kernel "$(kernel scale "$api")" --entry scale \
    --synthetic "$size" --arg factor=2 --vram-budget "$BUDGET" --block "$BLOCK" "${devs[@]}" "$@"
}
gemv() { # gemv API GPUS
  local api=$1 gpus=$2
  local devs=(); [ "$gpus" = 2 ] && devs=(--devices all)
  one "gemv-$api-${gpus}gpu-r$r" "$api" --kernel "$(kernel gemv_f16 "$api")" --entry gemv_f16 \
    --synthetic "$GEMV_SIZE" --dtype f16 --resident "$OUT_DIR/x.f32" --out-dtype f32 --reduce $COLS \
    --work output --items 256 --local 256 --arg cols=$COLS --vram-budget "$BUDGET" --block "$BLOCK" \
    "${devs[@]}"
}
SUFFIX=
for r in $(seq 1 "$REPEAT"); do
  # Interleaved: each figure's OpenCL and CUDA runs back to back, the order alternating.
  apis="opencl cuda"; [ $((r % 2)) = 0 ] && apis="cuda opencl"
  for api in $apis; do in_place "$api" 1 "$SIZE"; done
  for api in $apis; do in_place "$api" 2 "$SIZE2"; done
  for api in $apis; do gemv "$api" 1; done
  for api in $apis; do gemv "$api" 2; done
  if [ "$NODES" -ge 2 ]; then
    SUFFIX=-numa-on;  in_place opencl 2 "$SIZE2" --numa on
    SUFFIX=-numa-off; in_place opencl 2 "$SIZE2" --numa off
    SUFFIX=
  fi
done
[ "$NODES" -ge 2 ] || log "one NUMA node: --numa on/off not measured (placement changes nothing)"
# compare over both GPUs: the same workloads through OpenCL and CUDA, paired, with the ratio
# per device and in total (in place over $GEMV_SIZE, i.e. 10 GiB per GPU; y = W·x over
# $GEMV_SIZE of weights).
log "compare --devices all"
"$P" compare --devices all --size "$GEMV_SIZE" --vram-budget "$BUDGET" --sizes "$BLOCK" \
  --repeat 3 --point-repeats 3 --save "$OUT_DIR/raw/compare-2gpu.compare" > "$OUT_DIR/compare-2gpu.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/compare-2gpu.txt"
log "bench devices --devices all --api both"
"$P" bench devices --devices all --api both --repeat 5 --save "$OUT_DIR/raw/bench-devices.json" \
  > "$OUT_DIR/bench-devices.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/bench-devices.txt"
python3 "$HERE/scripts/gpu-multi-table.py" "$OUT_DIR/raw" > "$OUT_DIR/table.txt" 2>&1
log "done"
cat "$OUT_DIR/compare-2gpu.txt"
cat "$OUT_DIR/bench-devices.txt"
cat "$OUT_DIR/raw/link-probe.jsonl" 2>/dev/null
cat "$OUT_DIR/table.txt"
