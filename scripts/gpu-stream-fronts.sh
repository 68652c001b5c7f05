#!/usr/bin/env bash
# Issue 37 on the GPU machine: the seed's work (10 GiB of uint32 in place, 256 MiB blocks, a
# 4 GiB budget, the seed's kernel) through every front, in rounds so that drift falls on all:
#   cli        pinstream run --synthetic 10GiB --passes 5 --residency off (the engine from the CLI)
#   cli_sN     the same with --slots N, for each N in CLI_SLOTS (none unless set)
#   c-loop_sN, cuda-loop_sN  the loops with N blocks of budget, for each N in LOOP_SLOTS
#   c-call     examples/c/seed_stream.c (the engine through psStream*, --repeat 5)
#   c-loop     examples/c/seed_port.c (the seed's hand-written three-queue loop, OpenCL)
#   cuda-loop  examples/cuda/seed_port.cu (the same loop in CUDA, three streams)
#   python     examples/python/stream_larger_than_vram.py (pinstream.stream over a pinned NumPy array),
#              --residency off as the CLI and the C call (pinstream.stream's default, auto,
#              keeps 3 GiB of blocks in VRAM: the first pass uploads them with no download
#              beside, the last downloads them with no upload, so its GB/s of moved bytes read
#              0.934 of the CLI's on an H100, bench/results/h100/session-2026-12-07c)
# FRONT_PASSES=N (default 1): the C call and Python stream N passes in one call (seed_stream
# --passes N, the Python example's --passes N) and the CLI --passes N, and the table compares
# whole runs (each front's bytes over its run's device time: one pipeline fill and drain per N
# passes for all three). With 1, each C or Python run is one pass on its own, while the CLI's
# figure is a pass inside its --passes CLI_PASSES pipeline, which pays no fill or drain: about
# 5 ms of a 231 ms pass on the H100 (session-2026-12-07b). The loops stream one pass a run,
# so the goals against CUDA's loop are judged on FRONT_PASSES=1 only.
# FRONTS="c-call python" runs only those beside the CLI (cheaper rounds, so more of them). The
# order turns each round: the CLI then the others on odd rounds, the others reversed then the
# CLI on even ones, so drift within a round falls on each side in turn.
# Each figure is the median pass's combined GB/s (up + down bytes over its time); the table
# gives each front's median over the rounds and the goals' ratios: the C call and the Python
# call against the CLI and against CUDA's loop, each >= 0.99.
#   scripts/gpu-stream-fronts.sh BUNDLE WHEEL_DIR OUT_DIR [ROUNDS]
# BUNDLE: scripts/build-gpu-bundle.sh's folder (pinstream, libpinstream_capi.so);
# WHEEL_DIR: the Python package's wheel (scripts/gpu-python-wheels.sh). Never changes the
# GPU's settings.
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
BUNDLE=$(readlink -f "$1"); WHL=$(readlink -f "$2"); OUT_DIR=$3; ROUNDS=${4:-2}
mkdir -p "$OUT_DIR" && OUT_DIR=$(readlink -f "$OUT_DIR")
ARGS=${STREAM_ARGS:---total 10GiB --block 256MiB --budget 4GiB --repeat 5}
FRONT_PASSES=${FRONT_PASSES:-1}
CALL_ARGS=$ARGS
if [ "$FRONT_PASSES" != 1 ]; then
  CALL_ARGS="$ARGS --passes $FRONT_PASSES" CLI_PASSES=$FRONT_PASSES
fi
BIN=$(mktemp -d /tmp/stream-fronts.XXXX)
trap 'rm -rf "$BIN"' EXIT
log() { echo "== $*" | tee -a "$OUT_DIR/build.log"; }
register_nvidia_icd
{ date -u; cat "$BUNDLE/COMMIT" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv; nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo; echo "args: $ARGS, rounds $ROUNDS, front passes $FRONT_PASSES"; } > "$OUT_DIR/machine.txt" 2>&1
# What the table reads to compare whole runs (see FRONT_PASSES).
echo "$FRONT_PASSES" > "$OUT_DIR/front-passes"
cat "$OUT_DIR/machine.txt"
find_opencl_dev
PINSTREAM_LIB_DIR=$BUNDLE bash scripts/install-capi.sh "$BIN/capi" >> "$OUT_DIR/build.log" 2>&1 || { log "install-capi failed"; tail "$OUT_DIR/build.log"; exit 1; }
for prog in seed_stream seed_port; do
  cc -std=c11 -O2 -Wall -I"$BIN/capi/include" ${CL_INC:+-I"$CL_INC"} "examples/c/$prog.c" \
    -L"$BIN/capi/lib" -lpinstream "$CL_LIB" -lpthread -Wl,-rpath,"$BIN/capi/lib" -o "$BIN/$prog" >> "$OUT_DIR/build.log" 2>&1 \
    || { log "$prog did not build"; tail -20 "$OUT_DIR/build.log"; exit 1; }
done
nvcc -O2 -o "$BIN/seed_port_cuda" examples/cuda/seed_port.cu >> "$OUT_DIR/build.log" 2>&1 || { log "the CUDA loop did not build"; exit 1; }
SITE=$BIN/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHL"/*.whl >> "$OUT_DIR/build.log" 2>&1 || { log "the wheel did not install"; exit 1; }
# Throughput only: SKIP_WARM=1 skips touching the VM's memory first (pin times then include
# the VM's growth).
[ -n "${SKIP_WARM:-}" ] || warm_vm_memory 24 10 2>&1 | tee -a "$OUT_DIR/build.log"
rc=0
run() {
  local name=$1; shift
  log "$name: $*"
  "$@" > "$OUT_DIR/$name.txt" 2>&1
  local r=$?
  echo "rc=$r" >> "$OUT_DIR/$name.txt"
  [ $r = 0 ] || rc=1
  grep -E "combined|best_combined|GB/s|rc=" "$OUT_DIR/$name.txt" | tail -4
}
# shellcheck disable=SC2086
cli_run() {
  run "cli-$1" "$BUNDLE/pinstream" run --kernel examples/seed.cl --entry seed --synthetic 10GiB --dtype u32 \
    --block 256MiB --vram-budget 4GiB --passes ${CLI_PASSES:-5} --residency off --json
}
for r in $(seq 1 "$ROUNDS"); do
  # The CLI first on odd rounds, last on even ones (below).
  [ $((r % 2)) = 1 ] && cli_run "$r"
  # CLI_SLOTS="8 16": the same run with that many ring slots (the engine's default is 4; the
  # hand-written loops fill the budget: budget / block slots).
  for n in ${CLI_SLOTS:-}; do
    run "cli_s$n-$r" "$BUNDLE/pinstream" run --kernel examples/seed.cl --entry seed --synthetic 10GiB --dtype u32 \
      --block 256MiB --vram-budget 4GiB --passes ${CLI_PASSES:-5} --residency off --slots "$n" --json
  done
  # LOOP_SLOTS="4": the hand-written loops with a budget of that many blocks (c-loop_sN,
  # cuda-loop_sN), ARGS' --budget replaced by N times its --block (both given in MiB).
  for n in ${LOOP_SLOTS:-}; do
    block=$(echo "$ARGS" | sed -n 's/.*--block \([0-9]*\)MiB.*/\1/p')
    # shellcheck disable=SC2001
    small=$(echo "$ARGS" | sed "s/--budget [^ ]*/--budget $((n * ${block:-0}))MiB/")
    if [ -z "$block" ] || [ "$small" = "$ARGS" ]; then
      log "LOOP_SLOTS needs '--block NMiB' and '--budget X' in STREAM_ARGS: $ARGS"; rc=1; break
    fi
    run "c-loop_s$n-$r" "$BIN/seed_port" $small
    run "cuda-loop_s$n-$r" "$BIN/seed_port_cuda" $small
  done
  # FRONTS: which of the other fronts run, in this order on odd rounds and the reverse on even
  # ones, so drift within a round falls on each side in turn (default: all four).
  order=${FRONTS:-c-call c-loop cuda-loop python}
  [ $((r % 2)) = 0 ] && order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
  for front in $order; do
    case $front in
      c-call) run "c-call-$r" "$BIN/seed_stream" $CALL_ARGS ;;
      c-loop) run "c-loop-$r" "$BIN/seed_port" $ARGS ;;
      cuda-loop) run "cuda-loop-$r" "$BIN/seed_port_cuda" $ARGS ;;
      python) run "python-$r" env PYTHONPATH="$SITE" python3 examples/python/stream_larger_than_vram.py $CALL_ARGS --residency off ;;
      *) log "FRONTS: unknown front $front (c-call, c-loop, cuda-loop, python)"; rc=1 ;;
    esac
  done
  [ $((r % 2)) = 0 ] && cli_run "$r"
done
python3 scripts/stream-fronts-table.py "$OUT_DIR" | tee "$OUT_DIR/table.md" || rc=1
exit $rc
