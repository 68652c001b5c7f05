#!/usr/bin/env bash
# Installs pinstream's C library: header, shared and static library, pkg-config file and CMake
# package config, so that `pkg-config --cflags --libs pinstream` and `find_package(pinstream)`
# work.
#
#   scripts/install-capi.sh PREFIX
#
# Builds `cargo build --release -p pinstream-capi` first, unless PINSTREAM_LIB_DIR names a
# folder that already holds libpinstream_capi.so and libpinstream_capi.a (the tests install
# their debug build that way). Installs:
#   PREFIX/include/pinstream.h
#   PREFIX/lib/libpinstream.so.VERSION, libpinstream.so.MAJOR, libpinstream.so, libpinstream.a
#   PREFIX/lib/pkgconfig/pinstream.pc            (relocatable: paths from ${pcfiledir})
#   PREFIX/lib/cmake/pinstream/pinstreamConfig.cmake, pinstreamConfigVersion.cmake
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig, or -DCMAKE_PREFIX_PATH=PREFIX (no need for
# either with PREFIX=/usr/local), and LD_LIBRARY_PATH=PREFIX/lib where PREFIX/lib is not in
# the loader's path (or run ldconfig).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${1:?usage: scripts/install-capi.sh PREFIX}
CAPI=$ROOT/crates/pinstream-capi
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
MAJOR=${VERSION%%.*}
MINOR=$(echo "$VERSION" | cut -d. -f2)
# What a program linking the static library also needs (rustc --print native-static-libs,
# x86_64/aarch64 Linux with glibc).
STATIC_LIBS="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
STATIC_LIBS_CMAKE=$(echo "$STATIC_LIBS" | sed 's/-l//g; s/ /;/g')

LIB_DIR=${PINSTREAM_LIB_DIR:-}
if [ -z "$LIB_DIR" ]; then
  (cd "$ROOT" && cargo build --release --locked -p pinstream-capi)
  LIB_DIR=$ROOT/target/release
fi
for f in libpinstream_capi.so libpinstream_capi.a; do
  [ -f "$LIB_DIR/$f" ] || { echo "install-capi: $LIB_DIR/$f is missing: build it with cargo build --release -p pinstream-capi" >&2; exit 1; }
done

mkdir -p "$PREFIX/include" "$PREFIX/lib/pkgconfig" "$PREFIX/lib/cmake/pinstream"
PREFIX=$(cd "$PREFIX" && pwd)
install -m 0644 "$CAPI/include/pinstream.h" "$PREFIX/include/pinstream.h"
install -m 0755 "$LIB_DIR/libpinstream_capi.so" "$PREFIX/lib/libpinstream.so.$VERSION"
ln -sfn "libpinstream.so.$VERSION" "$PREFIX/lib/libpinstream.so.$MAJOR"
ln -sfn "libpinstream.so.$MAJOR" "$PREFIX/lib/libpinstream.so"
install -m 0644 "$LIB_DIR/libpinstream_capi.a" "$PREFIX/lib/libpinstream.a"
fill() {
  sed -e "s|@VERSION@|$VERSION|g" -e "s|@MAJOR@|$MAJOR|g" -e "s|@MINOR@|$MINOR|g" \
      -e "s|@STATIC_LIBS@|$STATIC_LIBS|g" -e "s|@STATIC_LIBS_CMAKE@|$STATIC_LIBS_CMAKE|g" "$1" > "$2"
}
fill "$CAPI/cmake/pinstream.pc.in" "$PREFIX/lib/pkgconfig/pinstream.pc"
fill "$CAPI/cmake/pinstreamConfig.cmake.in" "$PREFIX/lib/cmake/pinstream/pinstreamConfig.cmake"
fill "$CAPI/cmake/pinstreamConfigVersion.cmake.in" "$PREFIX/lib/cmake/pinstream/pinstreamConfigVersion.cmake"
echo "installed pinstream $VERSION into $PREFIX"
