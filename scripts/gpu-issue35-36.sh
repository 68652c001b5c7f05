#!/usr/bin/env bash
# Issues 35 and 36 on the GPU machine, in parts that each fit one device call (600 s):
#   passes          scripts/gpu-passes.sh (issue 36's goals) into OUT_DIR/passes
#   before-after    scripts/gpu-redesign.sh BEFORE AFTER (compare and demo, the house's
#                   before/after: issue 35's "within ±1% on every figure") into OUT_DIR/ba
#   tests GLOB      the test executables whose names match GLOB (e.g. 'test-[a-h]*',
#                   'unit-*'), scripts/gpu-tests.sh, into OUT_DIR/tests-LABEL
#   python          the Python package's pytest suite on NVIDIA's OpenCL (WHEEL_DIR's wheels)
# Several parts run in one call, in order: each writes its own folder, and all of OUT_DIR is
# packed into OUT_DIR/results.tar.xz at the end (the device tool brings back 8 files at most).
#   scripts/gpu-issue35-36.sh AFTER_BUNDLE BEFORE_BUNDLE WHEEL_DIR OUT_DIR PART [ARG] [PART [ARG]]...
# Never changes the GPU's settings.
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
AFTER=$(readlink -f "$1"); BEFORE=$(readlink -f "$2"); WHL=$3; OUT_DIR=$4; shift 4
mkdir -p "$OUT_DIR" && OUT_DIR=$(readlink -f "$OUT_DIR")
register_nvidia_icd
{ date -u; cat "$AFTER/COMMIT"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"
rc=0
while [ $# -gt 0 ]; do
  part=$1; shift
  case $part in
    passes) bash scripts/gpu-passes.sh "$AFTER" "$OUT_DIR/passes" || rc=1 ;;
    before-after) bash scripts/gpu-redesign.sh "$BEFORE" "$AFTER" "$OUT_DIR/ba" || rc=1 ;;
    tests)
      glob=$1; shift
      label=$(echo "$glob" | tr -c 'a-z0-9\n' '_')
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
