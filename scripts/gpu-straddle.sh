#!/usr/bin/env bash
# Does a transfer that crosses the boundary between two USE_HOST_PTR registrations run at
# pinned speed on NVIDIA's OpenCL driver? The seed port at 4 GiB (its transfers go straight
# from the pointer, as a C program's do) with blocks that line up with the registrations and
# blocks that cross them, in both modes, with the default layout (one registration up to the
# max allocation) and forced smaller registrations (PINSTREAM_MAX_CHUNK: they overlap by
# half, so blocks up to half a registration should stay inside one).
# Usage (GPU machine): scripts/gpu-straddle.sh gpu-capi   (after scripts/install-capi.sh gpu-capi here)
set -u
. "$(dirname "$0")/gpu-common.sh"
CAPI=$(cd "${1:-gpu-capi}" && pwd)
OUT_DIR=${OUT:-out}
mkdir -p "$OUT_DIR"
register_nvidia_icd
BIN=$(mktemp -d /tmp/straddle.XXXX)
trap 'rm -rf "$BIN"' EXIT
REAL=$(ls "$CAPI"/lib/libpinstream.so.*.*.* | head -1)
mkdir -p "$BIN/lib" && ln -sf "$REAL" "$BIN/lib/libpinstream.so.0" && ln -sf "$REAL" "$BIN/lib/libpinstream.so"
CL_LIB=$(ldconfig -p | awk '/libOpenCL\.so\.1 / {print $NF; exit}')
cc -std=c11 -O2 -I"$CAPI/include" examples/c/seed_port.c -L"$BIN/lib" -lpinstream "$CL_LIB" -lpthread \
  -Wl,-rpath,"$BIN/lib" -o "$BIN/seed_port" || exit 1
# Each line: PINSTREAM_MAX_CHUNK (empty: the default, one registration up to the max allocation)
# and the seed port's arguments.
while read -r chunk args; do
  [ "$chunk" = "-" ] && chunk=""
  echo "== PINSTREAM_MAX_CHUNK=${chunk:-default} seed_port --total 4GiB --budget 2GiB --repeat 3 $args" | tee -a "$OUT_DIR/straddle.txt"
  PINSTREAM_MAX_CHUNK=$chunk "$BIN/seed_port" --total 4GiB --budget 2GiB --repeat 3 $args 2>&1 |
    grep -E "pinned:|pass [0-9]: write|result:" | tee -a "$OUT_DIR/straddle.txt"
done <<'LIST'
- --block 256MiB
- --block 384MiB
- --register --block 256MiB
- --register --block 384MiB
256MiB --block 384MiB
256MiB --register --block 128MiB
1GiB --register --block 384MiB
1GiB --register --block 512MiB
LIST
