#!/usr/bin/env bash
# Installs and tests what scripts/build-dist.sh put into dist/, as users install it:
#   cli    cargo install --path crates/pinstream-cli (into a temporary root; the workspace's
#          target/ and the dev profile, so it reuses the test build): --version, devices
#   wheel  the manylinux wheel into a fresh virtual environment: the Python tests
#   sdist  the sdist, built by pip, into another: the Python tests
#   capi   the C archive extracted elsewhere: the seed port built against it with pkg-config
#          and with CMake (shared and static), run small on the default device; its
#          psGetVersion is the archive's version
# (The crates are tested by build-dist.sh itself: cargo package builds each from its package.)
#
#   scripts/test-dist.sh [--only cli,wheel,sdist,capi]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ONLY="cli,wheel,sdist,capi"
[ "${1:-}" = "--only" ] && ONLY=${2:?--only takes a list such as wheel,capi}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
DIST=$ROOT/dist
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
wants() { [[ ",$ONLY," == *",$1,"* ]]; }
one() {
  local found=("$DIST"/$1)
  [ -f "${found[0]}" ] || { echo "test-dist.sh: no dist/$1: run scripts/build-dist.sh" >&2; exit 1; }
  echo "${found[0]}"
}

cli() {
  CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target} \
    cargo install --quiet --locked --debug --path crates/pinstream-cli --root "$TMP/cargo"
  "$TMP/cargo/bin/pinstream" --version | tee "$TMP/version"
  grep -qx "pinstream $VERSION" "$TMP/version"
  "$TMP/cargo/bin/pinstream" devices >/dev/null
}

# (`f=$(one ...)` on a line of its own, so that set -e stops at a missing file.)
wheel() {
  local f
  f=$(one "pinstream-$VERSION-*manylinux*.whl")
  bash scripts/test-python.sh --dist "$f"
}

sdist() {
  local f
  f=$(one "pinstream-$VERSION.tar.gz")
  bash scripts/test-python.sh --dist "$f"
}

# The seed port (or, with a second argument, seed_stream: its loop as psStreamRun), small,
# must pass and report the archive's version. seed_stream's budget holds two blocks with the
# bounds guard the engine puts after each on CPU devices.
seed() {
  local out name=${2:-seed_port} budget=2MiB
  [ "$name" = seed_stream ] && budget=4MiB
  out=$(LD_LIBRARY_PATH=$PREFIX/lib "$1" --total 4MiB --block 1MiB --budget $budget)
  grep -q "mismatches=0 PASS" <<<"$out" || { echo "$out" >&2; exit 1; }
  grep -qx "$name: libpinstream $VERSION" <<<"$out" || { echo "$out" >&2; exit 1; }
}

capi() {
  local f
  f=$(one "libpinstream-$VERSION-linux-$(uname -m).tar.gz")
  tar -C "$TMP" -xzf "$f"
  PREFIX=$TMP/libpinstream-$VERSION-linux-$(uname -m)
  [ "$(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --modversion pinstream)" = "$VERSION" ]
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Werror examples/c/seed_port.c \
    $(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --cflags --libs pinstream) \
    -lOpenCL -lpthread -o "$TMP/seed_pc"
  seed "$TMP/seed_pc"
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Werror examples/c/seed_stream.c \
    $(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --cflags --libs pinstream) \
    -lOpenCL -lpthread -o "$TMP/seed_stream_pc"
  seed "$TMP/seed_stream_pc" seed_stream
  cmake -S examples/c -B "$TMP/seed" -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
  cmake --build "$TMP/seed" >/dev/null
  seed "$TMP/seed/seed_port"
  seed "$TMP/seed/seed_port_static"
  seed "$TMP/seed/seed_stream" seed_stream
  seed "$TMP/seed/seed_stream_static" seed_stream
  # The static build needs no libpinstream.so at run time.
  if ldd "$TMP/seed/seed_port_static" | grep -q libpinstream; then
    echo "test-dist.sh: seed_port_static loads libpinstream" >&2; exit 1
  fi
  echo "test-dist.sh: the C archive builds the seed port and seed_stream (pkg-config, CMake shared and static)"
}

for part in cli wheel sdist capi; do
  if wants "$part"; then
    t0=$SECONDS
    "$part"
    echo "test-dist.sh: $part passed in $((SECONDS - t0)) s"
  fi
done
