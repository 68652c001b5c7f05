#!/usr/bin/env bash
# The GPU validation, in one go, on a machine with an NVIDIA GPU (the H200 of the device tool).
#
#   scripts/gpu-check.sh [BIN_DIR] [OUT_DIR]
#
# BIN_DIR holds the release `pinstream` binary and, optionally, test executables built with
# `scripts/build-gpu-bundle.sh`; OUT_DIR receives raw JSON and the printed tables.
# Needs root only to register NVIDIA's OpenCL ICD and to drop to user nobody for the
# memlock run. It never changes the GPU's settings.
set -u
. "$(dirname "$0")/gpu-common.sh"
BIN_DIR=${1:-gpu-bundle}
OUT_DIR=${2:-${OUT:-out}}
SIZE=${PINSTREAM_CHECK_SIZE:-10GiB}
mkdir -p "$OUT_DIR"
log() { echo "== $*" | tee -a "$OUT_DIR/check.log"; }

register_nvidia_icd

# Copy the binary where user nobody can run it.
install -m 0755 "$BIN_DIR/pinstream" /tmp/pinstream
P=/tmp/pinstream

log "machine"
{ date -u; uname -a; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,pcie.link.gen.current,pcie.link.width.current --format=csv; nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo; echo "root memlock: $(ulimit -l)"; cat /sys/kernel/mm/transparent_hugepage/enabled; } > "$OUT_DIR/machine.txt" 2>&1
cat "$OUT_DIR/machine.txt"

# The device VM grows its RAM on first use (about 3 s per 8 GiB, KINDS.md): touch 40 GiB once so
# that pin times measure pinning, not the VM's growth. A machine in service has its RAM already.
log "warming the VM's memory (40 GiB touched once, then freed)"
# Freeing 40 GiB keeps the kernel busy for a while; the first strategy measured right after
# it ran 2-4% slower in one run (bench/results/h200/earlier/gpu-check-run4): wait 15 s.
warm_vm_memory 40 15 2>&1 | tee -a "$OUT_DIR/check.log"

log "devices"
$P devices > "$OUT_DIR/devices.txt" 2>&1; echo "rc=$?" >> "$OUT_DIR/devices.txt"
$P devices --json > "$OUT_DIR/devices.json" 2>> "$OUT_DIR/check.log"
cat "$OUT_DIR/devices.txt"

log "doctor as root, --size $SIZE"
$P doctor --size "$SIZE" --block 256MiB --repeat 5 --save "$OUT_DIR/doctor-root.json" > "$OUT_DIR/doctor-root.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/doctor-root.txt"
cat "$OUT_DIR/doctor-root.txt"

log "doctor as nobody with RLIMIT_MEMLOCK = 8 MiB, --size $SIZE"
NOBODY_OUT=$(mktemp -d /tmp/pinstream-nobody.XXXX); chmod 0777 "$NOBODY_OUT"
prlimit --memlock=8388608:8388608 -- setpriv --reuid=65534 --regid=65534 --clear-groups -- \
  env HOME=/tmp POCL_CACHE_DIR="$NOBODY_OUT/pocl" sh -c "echo \"memlock limit: \$(ulimit -l) KiB, uid \$(id -u)\"; $P doctor --size $SIZE --block 256MiB --repeat 5 --save $NOBODY_OUT/doctor-nobody.json" \
  > "$OUT_DIR/doctor-nobody.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/doctor-nobody.txt"
cp "$NOBODY_OUT/doctor-nobody.json" "$OUT_DIR/" 2>/dev/null
cat "$OUT_DIR/doctor-nobody.txt"

log "demo: 10 GiB in place and y = W·x over 10 GiB of f16 weights, VRAM budget 4 GiB"
$P demo --vram-budget 4GiB --compare-sequential --save "$OUT_DIR/demo.json" > "$OUT_DIR/demo.txt" 2>&1
echo "rc=$?" >> "$OUT_DIR/demo.txt"
cat "$OUT_DIR/demo.txt"

log "a small run's Perfetto trace (1 GiB synthetic, 64 MiB blocks, 512 MiB budget)"
$P run --kernel examples/scale.cl --entry scale --synthetic 1GiB --arg factor=2 --block 64MiB \
  --vram-budget 512MiB --compare-sequential --trace "$OUT_DIR/trace-small.json" --json > "$OUT_DIR/run-small.json" 2> "$OUT_DIR/run-small.err"
echo "run-small rc=$?" | tee -a "$OUT_DIR/check.log"

# The library and CLI tests, on the GPU as default device, where the bundle has them.
if ls "$BIN_DIR"/test-* >/dev/null 2>&1; then
  log "tests on the GPU"
  for t in "$BIN_DIR"/test-*; do
    name=$(basename "$t")
    CARGO_BIN_EXE_pinstream=$P "$t" --test-threads=1 > "$OUT_DIR/$name.txt" 2>&1
    echo "$name (default device) rc=$? $(grep -E '^test result' "$OUT_DIR/$name.txt")" | tee -a "$OUT_DIR/check.log"
  done
  # PoCL's CPU device there has cl_intel_unified_shared_memory: intel-usm for real.
  pocl=$(python3 -c "import json; print(next(d['index'] for d in json.load(open('$OUT_DIR/devices.json'))['devices'] if 'Portable' in d['platform_name']))" 2>/dev/null)
  if [ -n "$pocl" ] && [ -x "$BIN_DIR/test-library" ]; then
    for t in library stream; do
      PINSTREAM_TEST_DEVICE=$pocl POCL_CACHE_DIR=/tmp/pocl-cache "$BIN_DIR/test-$t" --test-threads=1 > "$OUT_DIR/test-$t-pocl.txt" 2>&1
      echo "test-$t (PoCL device $pocl) rc=$? $(grep -E '^test result' "$OUT_DIR/test-$t-pocl.txt")" | tee -a "$OUT_DIR/check.log"
    done
  fi
fi
log "done"
