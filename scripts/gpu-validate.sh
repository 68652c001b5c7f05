#!/usr/bin/env bash
# A GPU validation in parts that each fit one device call (600 s), all results under OUT_DIR:
#   tests GLOB        the test executables whose names match GLOB ('test-*' and 'unit-*' are
#                     all of them), scripts/gpu-tests.sh, into OUT_DIR/tests-LABEL
#   python            the Python package's pytest suite on NVIDIA's OpenCL (WHEEL_DIR's wheels)
#   passes            scripts/gpu-passes.sh (issue 36: passes and residency) into OUT_DIR/passes
#   compare-passes    `compare --passes 10` at 4 and 8 GiB budgets (issue 36's CUDA ratio)
#   passes-trace      `demo --passes 10 --vram-budget 8GiB --trace` (TRACE_BUDGETS="4GiB 8GiB" for
#                     more, TRACE_RUNS=K runs of each): where a later pass's time goes (issue 36)
#   cuda-passes       CUDA's own hand-written loop over issue 36's y = W·x passes
#                     (bench/ceiling/cuda_passes.cu) and `demo --passes 10` at 4 GiB,
#                     alternating, CUDA_PASSES_RUNS=K runs of each (default 4): whether CUDA's
#                     loop has slow passes too
#   storage-passes    scripts/gpu-storage-passes.sh (issue 36: a file larger than its cgroup)
#   stream-fronts N   scripts/gpu-stream-fronts.sh, N rounds, the CLI one pass per run like
#                     every other front (issue 37; CLI_PASSES=5: five passes in one run, each
#                     pass a figure, as the C and Python fronts give; FRONT_PASSES=5: the C
#                     and Python calls five passes each too, whole runs compared)
#   vk-fronts N       scripts/gpu-vk-fronts.sh, N rounds: the seed's work through the CLI's
#                     `run --api vulkan` and through psVkStream* (examples/c/vk_stream.c --engine)
#   hang-stacks NAME S  the test executable NAME; if it still runs after S seconds, every
#                     thread's stack, then it is stopped (a hang found on the GPU)
#   repeat NAME N     the test executable NAME N times (a fresh random seed each, for the fuzz
#                     tests), each as hang-stacks NAME 60 into OUT_DIR/repeat-NAME/K; stops at
#                     the first that fails or hangs
#   zc-wait           compare's zero-copy rows against CUDA, --wait auto against driver (ZC_ROUNDS)
#   zc-goals          issue 38's zero-copy goals, each shape in one compare run (ZC_ROUNDS runs)
#   zc-timeline       the bundle's zero_copy_timeline alone (4,096 x 4 KiB, 65,536 x 256 B): a
#                     zero-copy call's host part on this host's CPU, into OUT_DIR/zc-timeline.txt
#   mapped            scripts/gpu-mapped.sh: zero-copy pieces against CUDA, the host part of a call
#   vk-ways           scripts/gpu-vulkan.sh ways: every --vk-copy way, bench and demo, beside CUDA
#   vk-compare        compare --api vulkan per way in VK_WAYS (auto transfer), VK_ROUNDS rounds
#   vk-trace          `demo --api vulkan --size 4GiB --trace` per way in VK_WAYS (auto crossed):
#                     where each block's upload, kernel and download run, per queue
#   vk-ceiling        scripts/gpu-vk-ceiling.sh (issue 38: plain Vulkan against CUDA, and the
#                     bundle's own Vulkan copies against both, in one run)
#   before-after DIR  scripts/gpu-redesign.sh DIR BUNDLE (compare and demo, an older bundle
#                     against this one) into OUT_DIR/ba; REDESIGN_ROUNDS=N for N compare pairs,
#                     the order turning, each figure's ratio per round and over the rounds
# Several parts run in one call, in order: each writes its own folder, and all of OUT_DIR is
# packed into OUT_DIR/results.tar.xz at the end (the device tool brings back 8 files at most).
#   scripts/gpu-validate.sh BUNDLE WHEEL_DIR OUT_DIR PART [ARG] [PART [ARG]]...
# BUNDLE: scripts/build-gpu-bundle.sh's folder; WHEEL_DIR: scripts/gpu-python-wheels.sh's.
# Never changes the GPU's settings.
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
AFTER=$(readlink -f "$1"); WHL=$(readlink -f "$2"); OUT_DIR=$3; shift 3
mkdir -p "$OUT_DIR" && OUT_DIR=$(readlink -f "$OUT_DIR")
# A machine the device tool lends again may still hold an earlier session's folder of the same
# name under $OUT (seen: a run1 of three hours before came back packed with today's): a folder
# of the device tool's $OUT is emptied first, so only this run's files come back.
if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && case $OUT_DIR in "$(readlink -f "$OUT")"/?*) true ;; *) false ;; esac \
  && [ -n "$(ls -A "$OUT_DIR")" ]; then
  echo "note: $OUT_DIR held an earlier run's files: removed"
  find "$OUT_DIR" -mindepth 1 -delete
fi
register_nvidia_icd
{ date -u; cat "$AFTER/COMMIT"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
  # The host's CPU and its vector units (the zero-copy checks run in AVX-512 where it has it).
  grep -m1 "model name" /proc/cpuinfo; grep -m1 "^flags" /proc/cpuinfo | tr ' ' '\n' | grep -E "^(avx2|avx512[a-z0-9_]*)$" | tr '\n' ' '; echo
} > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"
rc=0
while [ $# -gt 0 ]; do
  part=$1; shift
  case $part in
    passes) bash scripts/gpu-passes.sh "$AFTER" "$OUT_DIR/passes" || rc=1 ;;
    before-after) bash scripts/gpu-redesign.sh "$(readlink -f "$1")" "$AFTER" "$OUT_DIR/ba" || rc=1; shift ;;
    compare-passes)
      mkdir -p "$OUT_DIR/compare-passes"
      for budget in 4GiB 8GiB; do
        echo "== compare --passes 10 --vram-budget $budget"
        timeout 280 "$AFTER/pinstream" compare --size 10GiB --vram-budget "$budget" --passes 10 \
          --residency auto --repeat 3 --save "$OUT_DIR/compare-passes/$budget.json" \
          > "$OUT_DIR/compare-passes/$budget.txt" 2>&1 || rc=1
        tail -n 25 "$OUT_DIR/compare-passes/$budget.txt"
      done ;;
    passes-trace)
      # TRACE_BUDGETS: the budgets to trace (default 8GiB); TRACE_RUNS: runs of each (default
      # 1), each into passes-trace/BUDGET[-rK]-* (a slow pass that moves between runs shows).
      # Beside each run, what GPU 0 reports every 20 ms (BUDGET[-rK]-gpu.csv: P-state, the
      # PCIe link's generation and width, clocks, power; read only): whether a window of slow
      # copies comes with the link or the P-state changing. TRACE_SAMPLE=0 leaves it out (a
      # query every 20 ms may itself disturb the GPU: compare runs with and without it).
      mkdir -p "$OUT_DIR/passes-trace"
      for budget in ${TRACE_BUDGETS:-8GiB}; do
        for k in $(seq 1 "${TRACE_RUNS:-1}"); do
          name=$budget; [ "${TRACE_RUNS:-1}" -gt 1 ] && name=$budget-r$k
          sampler=
          # TRACE_SAMPLE=alt: the sampler beside odd runs only, so runs with and without it
          # alternate (whether its queries change the slow passes).
          if [ "${TRACE_SAMPLE:-1}" = 1 ] || { [ "${TRACE_SAMPLE:-1}" = alt ] && [ $((k % 2)) = 1 ]; }; then
            # Its own time limit, so that it cannot outlive the run it samples.
            timeout 210 nvidia-smi -i 0 --query-gpu=timestamp,pstate,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.mem,power.draw \
              --format=csv,noheader -lms 20 > "$OUT_DIR/passes-trace/$name-gpu.csv" 2>&1 &
            sampler=$!
          fi
          # In local time, as nvidia-smi stamps its samples.
          date +%Y/%m/%d\ %H:%M:%S.%N > "$OUT_DIR/passes-trace/$name-start.txt"
          timeout 200 "$AFTER/pinstream" demo --api opencl --size 10GiB --vram-budget "$budget" --passes 10 \
            --residency auto --trace "$OUT_DIR/passes-trace/$name-trace.json" --json \
            > "$OUT_DIR/passes-trace/$name-demo.json" 2> "$OUT_DIR/passes-trace/$name-demo.err" || rc=1
          [ -n "$sampler" ] && { kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null; }
          tail -n 5 "$OUT_DIR/passes-trace/$name-demo.err"
        done
      done ;;
    cuda-passes)
      # Issue 36: the engine's y = W·x passes at 4 GiB (101 of 160 blocks of 64 MiB uploaded
      # per pass, 4 slots) against CUDA's own loop over the same blocks, run by run in turn.
      d="$OUT_DIR/cuda-passes"; mkdir -p "$d"
      # For this GPU (no compile on the first launch), else for nvcc's default.
      if nvcc -O2 -arch=native -o "$d/cuda_passes" bench/ceiling/cuda_passes.cu > "$d/build.log" 2>&1 \
        || nvcc -O2 -o "$d/cuda_passes" bench/ceiling/cuda_passes.cu >> "$d/build.log" 2>&1; then
        for k in $(seq 1 "${CUDA_PASSES_RUNS:-4}"); do
          timeout 200 "$AFTER/pinstream" demo --api opencl --size 10GiB --vram-budget 4GiB \
            --passes 10 --residency auto --trace "$d/r$k-trace.json" --json \
            > "$d/r$k-demo.json" 2> "$d/r$k-demo.err" || rc=1
          timeout 120 "$d/cuda_passes" --blocks 101 --block-mib 64 --slots 4 --passes 10 \
            > "$d/r$k-cuda.json" 2> "$d/r$k-cuda.err" || rc=1
        done
        python3 scripts/cuda-passes-table.py "$d" | tee "$d/table.md"
      else
        rc=1; tail -n 20 "$d/build.log"
      fi ;;
    storage-passes)
      timeout 540 bash scripts/gpu-storage-passes.sh "$AFTER" "$OUT_DIR/storage-passes" || rc=1 ;;
    stream-fronts)
      CLI_PASSES=${CLI_PASSES:-1} bash scripts/gpu-stream-fronts.sh "$AFTER" "$WHL" "$OUT_DIR/stream-fronts" "$1" \
        > "$OUT_DIR/stream-fronts.log" 2>&1 || rc=1
      tail -n 30 "$OUT_DIR/stream-fronts.log"; shift ;;
    vk-fronts)
      bash scripts/gpu-vk-fronts.sh "$AFTER" "$OUT_DIR/vk-fronts" "$1" > "$OUT_DIR/vk-fronts.log" 2>&1 || rc=1
      tail -n 30 "$OUT_DIR/vk-fronts.log"; shift ;;
    hang-stacks)
      [ $# -ge 2 ] || { echo "hang-stacks wants NAME SECONDS" >&2; rc=2; break; }
      # hang-stacks NAME SECONDS: the test executable NAME with its output shown; after SECONDS
      # still running, every thread's stack (scripts/hang-stacks.sh), then it is stopped.
      bash scripts/hang-stacks.sh "$OUT_DIR/hang-$1" "$2" env PINSTREAM_TEST_DEVICE_NAME=NVIDIA \
        PINSTREAM_TEST_SKIPS="$OUT_DIR/hang-$1.skipped" CARGO_BIN_EXE_pinstream="$AFTER/pinstream" \
        "$AFTER/$1" --test-threads=1 --nocapture || rc=1
      tail -n 60 "$OUT_DIR/hang-$1/stacks.txt" "$OUT_DIR/hang-$1/output.txt" 2>/dev/null; shift 2 ;;
    repeat)
      case ${2:-} in ''|*[!0-9]*) echo "repeat wants NAME N (a number of runs)" >&2; rc=2; break ;; esac
      # Each run has 60 s and, hung, up to 90 s of stacks: keep N small enough for one call.
      for k in $(seq 1 "$2"); do
        dir="$OUT_DIR/repeat-$1/$k"
        mkdir -p "$dir"
        if ! bash scripts/hang-stacks.sh "$dir/hang" 60 env -u PINSTREAM_FUZZ_SEED PINSTREAM_TEST_DEVICE_NAME=NVIDIA \
          PINSTREAM_TEST_SKIPS="$dir/skipped" CARGO_BIN_EXE_pinstream="$AFTER/pinstream" \
          "$AFTER/$1" --test-threads=1 --nocapture; then
          echo "repeat $1: run $k of $2 failed or hung (its seed is in $dir/hang/output.txt)"; rc=1; break
        fi
        grep -ho "PINSTREAM_FUZZ_SEED=[0-9]*" "$dir/hang/output.txt" 2>/dev/null | head -1
      done; shift 2 ;;
    mapped)
      # Zero-copy pieces against CUDA's kernel, each call's host part, the embedding lookup
      # (issue 38).
      bash scripts/gpu-mapped.sh "$AFTER" "$OUT_DIR/mapped" > "$OUT_DIR/mapped.log" 2>&1 || rc=1
      tail -n 30 "$OUT_DIR/mapped/mapped.md" ;;
    zc-wait)
      # Issue 38: how much of the zero-copy gap to CUDA is the wait. compare's gather rows
      # (4,096 x 4 KiB, checked and vouched, against CUDA's zero-copy kernel in the same
      # process) with OpenCL waiting by polling then sleeping (--wait auto, the default) and
      # by the driver (--wait driver, which spins as cuStreamSynchronize does), alternating,
      # ZC_ROUNDS rounds (default 2); small streams, as only the gather rows are read.
      mkdir -p "$OUT_DIR/zc-wait"
      for k in $(seq 1 "${ZC_ROUNDS:-2}"); do
        for wait in auto driver; do
          echo "== compare --wait $wait (round $k)"
          timeout 200 "$AFTER/pinstream" compare --wait "$wait" --size 256MiB --sizes 16MiB \
            --repeat 1 --point-repeats 15 --save "$OUT_DIR/zc-wait/$wait-$k.json" \
            > "$OUT_DIR/zc-wait/$wait-$k.txt" 2>&1 || rc=1
        done
      done
      python3 - "$OUT_DIR/zc-wait" <<'PY' | tee "$OUT_DIR/zc-wait/table.md"
import glob, json, os, sys
print("| wait | round | H2D checked | H2D vouched | D2H checked | D2H vouched |")
print("|---|---|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*-*.json"))):
    wait, _, k = os.path.basename(f)[:-5].rpartition("-")
    try:
        g = json.load(open(f))["gather"]
    except (OSError, ValueError, KeyError) as e:
        print(f"| {wait} | {k} | unread: {e} | | | |")
        continue
    cell = lambda d, key: "-" if g[d].get(key) is None else f"{g[d][key]:.3f}"
    print(f"| {wait} | {k} | " + " | ".join(cell(d, key) for d in ("h2d", "d2h")
          for key in ("zero_copy_vs_cuda_zero_copy", "vouched_vs_cuda_zero_copy")) + " |")
PY
      ;;
    zc-timeline)
      [ -x "$AFTER/zero_copy_timeline" ] || { echo "zc-timeline: no zero_copy_timeline in $AFTER"; rc=1; continue; }
      timeout 200 "$AFTER/zero_copy_timeline" 4096 4096 65536 256 > "$OUT_DIR/zc-timeline.txt" 2>&1 || rc=1
      grep -E "^ *(4096|65536) .*(auto|hot)" "$OUT_DIR/zc-timeline.txt" ;;
    zc-goals)
      # Issue 38's zero-copy goals, each in one compare run: 4,096 x 4 KiB (checked >= 0.97,
      # vouched >= 1.0) and 65,536 x 256 B (vouched >= 0.97) against CUDA's zero-copy kernel
      # in the same process, ZC_ROUNDS compare runs (default 2); small streams, as only the
      # gather rows are read.
      mkdir -p "$OUT_DIR/zc-goals"
      for k in $(seq 1 "${ZC_ROUNDS:-2}"); do
        echo "== compare --gather-shape 4096x4KiB --gather-shape 65536x256 (round $k)"
        timeout 280 "$AFTER/pinstream" compare --size 256MiB --sizes 16MiB --repeat 1 --point-repeats 15 \
          --gather-shape 4096x4KiB --gather-shape 65536x256 --save "$OUT_DIR/zc-goals/$k.json" \
          > "$OUT_DIR/zc-goals/$k.txt" 2>&1 || rc=1
      done
      python3 - "$OUT_DIR/zc-goals" <<'PY' | tee "$OUT_DIR/zc-goals/table.md"
import glob, json, os, sys
GOALS = {("4096 x 4 KiB", False): 0.97, ("4096 x 4 KiB", True): 1.0, ("65536 x 256 B", True): 0.97}
print("| round | figure | ratio | goal |")
print("|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    k = os.path.basename(f)[:-5]
    try:
        ratios = json.load(open(f))["ratios"]
    except (OSError, ValueError, KeyError) as e:
        print(f"| {k} | unread: {e} | | |")
        continue
    zero = [r for r in ratios if "zero-copy" in r["figure"]]
    if not zero:
        print(f"| {k} | no zero-copy ratio (CUDA not measured? see {k}.txt) | | |")
    for r in zero:
        fig = r["figure"]
        goal = GOALS.get((fig.split(" scattered")[0], "vouched" in fig))
        met = "-" if goal is None else ("met" if r["ratio"] >= goal else f"**below {goal}**")
        print(f"| {k} | {fig} | {r['ratio']:.3f} | {met} |")
PY
      ;;
    vk-ways)
      # Every --vk-copy way at 256 MiB beside CUDA, and the demo once per way (issue 38).
      bash scripts/gpu-vulkan.sh "$AFTER" "$OUT_DIR/vk-ways" ways > "$OUT_DIR/vk-ways.log" 2>&1 || rc=1
      tail -n 30 "$OUT_DIR/vk-ways.log" ;;
    vk-compare)
      # compare --api vulkan (1 GiB, as BENCHMARKS.md's figures) with each way in VK_WAYS
      # (default: auto transfer), the ways alternating over VK_ROUNDS rounds (default 2).
      mkdir -p "$OUT_DIR/vk-compare"
      use_nvidia_vulkan "$AFTER" "$OUT_DIR/vk-compare"
      for k in $(seq 1 "${VK_ROUNDS:-2}"); do
        for way in ${VK_WAYS:-auto transfer}; do
          echo "== compare --api vulkan --vk-copy $way (round $k)"
          timeout 280 "$AFTER/pinstream" compare --api vulkan --vk-copy "$way" --size 1GiB --repeat 3 \
            --save "$OUT_DIR/vk-compare/$way-$k.json" > "$OUT_DIR/vk-compare/$way-$k.txt" 2>&1 || rc=1
          grep -A12 "^Vulkan" "$OUT_DIR/vk-compare/$way-$k.txt" | head -14
        done
      done
      python3 scripts/vk-compare-table.py "$OUT_DIR/vk-compare" | tee "$OUT_DIR/vk-compare/table.md" ;;
    vk-trace)
      mkdir -p "$OUT_DIR/vk-trace"
      use_nvidia_vulkan "$AFTER" "$OUT_DIR/vk-trace"
      for way in ${VK_WAYS:-auto crossed}; do
        echo "== demo --api vulkan --vk-copy $way --trace"
        timeout 200 "$AFTER/pinstream" demo --api vulkan --vk-copy "$way" --size 4GiB \
          --trace "$OUT_DIR/vk-trace/$way.json" --save "$OUT_DIR/vk-trace/$way-demo.json" \
          > "$OUT_DIR/vk-trace/$way.txt" 2>&1 || rc=1
        grep -E "^(wall|in place|y = W)" "$OUT_DIR/vk-trace/$way.txt"
      done ;;
    vk-ceiling)
      bash scripts/gpu-vk-ceiling.sh "$AFTER" "$OUT_DIR/vk-ceiling" > "$OUT_DIR/vk-ceiling.log" 2>&1 || rc=1
      tail -n 40 "$OUT_DIR/vk-ceiling.log" ;;
    tests)
      glob=$1; shift
      # A folder name of at most 40 characters (a list of every executable is far longer),
      # the list's checksum keeping two lists apart.
      label=$(echo "$glob" | tr -c 'a-z0-9\n' '_' | cut -c1-28)_$(echo "$glob" | cksum | cut -d' ' -f1)
      names=$(cd "$AFTER" && ls $glob 2>/dev/null | sed 's/^test-//' | tr '\n' ' ')
      echo "== tests $glob: $names"
      GPU_TESTS="$names" bash scripts/gpu-tests.sh "$AFTER" "$OUT_DIR/tests-$label" > "$OUT_DIR/tests-$label.log" 2>&1 || rc=1
      tail -n 70 "$OUT_DIR/tests-$label.log" ;;
    python)
      SITE=/tmp/pinstream-site
      if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "$WHL"/*.whl > "$OUT_DIR/python.txt" 2>&1; then
        (cd crates/pinstream-py && PYTHONPATH=$SITE timeout 400 python3 -m pytest -q -p no:cacheprovider tests) >> "$OUT_DIR/python.txt" 2>&1 || rc=1
      else
        rc=1
      fi
      tail -n 15 "$OUT_DIR/python.txt" ;;
    *) echo "unknown part $part" >&2; rc=2 ;;
  esac
done
(cd "$OUT_DIR" && tar --exclude results.tar.xz -cJf results.tar.xz .)
echo "rc=$rc"
exit $rc
