#!/usr/bin/env bash
# Issue 36 on the GPU machine: passes and residency. In one run, back to back:
#   1. the link's peak: `bench --api both --sizes 256MiB` (OpenCL and CUDA, event-profiled
#      GB/s each way), the floor every pass is held to;
#   2. `demo --size 10GiB --passes 10` (in place, and y = W·x over 10 GiB of f16 weights)
#      with a 4 GiB and an 8 GiB VRAM budget, `--residency auto` and `off`, through OpenCL
#      and CUDA, each checked against the CPU;
#   3. a table (scripts/gpu-passes-table.py): per workload and budget, the bytes passes 2-10
#      moved, their device time against (those bytes) / (the peak of step 1), and passes per
#      second with residency against without.
# OUT_DIR (default $OUT) receives bench.json, demo-API-BUDGET-RES.json, run.log, table.md.
# PASSES_SIZE / PASSES_BUDGETS / PASSES_APIS make it small to try elsewhere (never for the
# record). About 5 minutes. Never changes the GPU's settings.
#   scripts/gpu-passes.sh BUNDLE [OUT_DIR]
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BIN=$(readlink -f "${1:?usage: gpu-passes.sh BUNDLE [OUT_DIR]}")/pinstream
OUT_DIR=$(mkdir -p "${2:-${OUT:-out}}" && readlink -f "${2:-${OUT:-out}}")
LOG=$OUT_DIR/run.log
log() { echo "== $(date -u +%T) $*" | tee -a "$LOG"; }
register_nvidia_icd
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } >> "$LOG" 2>&1
SIZE=${PASSES_SIZE:-10GiB}
step() {
  local name=$1; shift
  log "$name: pinstream $*"
  timeout 240 "$BIN" "$@" > "$OUT_DIR/$name.json" 2>> "$LOG"
  echo "rc=$? ($name)" | tee -a "$LOG"
}
step bench bench --api "${PASSES_PEAK_API:-both}" --sizes 256MiB --repeat 5 --strategy register --json
for api in ${PASSES_APIS:-opencl cuda}; do
  for budget in ${PASSES_BUDGETS:-4GiB 8GiB}; do
    for res in auto off; do
      step "demo-$api-$budget-$res" demo --api "$api" --size "$SIZE" --vram-budget "$budget" \
        --passes 10 --residency "$res" ${PASSES_DEMO:-} --json
    done
  done
done
python3 scripts/gpu-passes-table.py "$OUT_DIR" | tee "$OUT_DIR/table.md"
