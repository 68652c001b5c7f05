#!/usr/bin/env bash
# Builds what users install into dist/ (gitignored):
#   dist/crates/*.crate                 cargo package --workspace (verified: each crate builds
#                                       from its package alone); the Python crate goes to PyPI
#   dist/pinstream-V-cp311-abi3-manylinux_2_28_x86_64.whl
#                                       maturin --zig: linked against glibc 2.28's symbols, so
#                                       pip takes it on glibc >= 2.28 (RHEL 8, Debian 10+,
#                                       Ubuntu 18.10+), whatever glibc builds it
#   dist/pinstream-V.tar.gz             the sdist: `pip install` builds it with maturin
#   dist/libpinstream-V-linux-x86_64.tar.gz
#                                       the C library: include/, lib/ (shared and static),
#                                       lib/pkgconfig, lib/cmake/pinstream, README.md, licences
#
#   scripts/build-dist.sh [--profile release|dev] [--no-verify] [--allow-dirty]
#                         [--only crates,wheel,sdist,capi]
#
# --profile dev (CI) builds the wheel and the C library unoptimised and reuses target/debug;
# release (the default) is what is published. --no-verify skips building the crates from
# their packages and checks instead that every file their builds read is packaged
# (scripts/check-package.py, from the dep-info of builds already made: CI's tests);
# --allow-dirty packages uncommitted changes too. PINSTREAM_LIB_DIR names a folder with
# libpinstream_capi.{so,a} already built
# to archive (CI: its test build's) instead of building them. Tools: maturin and ziglang from PyPI into target/dist-venv (reused);
# PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PROFILE=release VERIFY="" DIRTY="" ONLY="crates,wheel,sdist,capi"
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE=${2:?--profile takes release or dev}; shift 2 ;;
    --no-verify) VERIFY=--no-verify; shift ;;
    --allow-dirty) DIRTY=--allow-dirty; shift ;;
    --only) ONLY=${2:?--only takes a list such as crates,wheel}; shift 2 ;;
    *) echo "build-dist.sh: unknown argument '$1' (see the script's header)" >&2; exit 2 ;;
  esac
done
case "$PROFILE" in
  release) PROFILE_DIR=release ;;
  dev) PROFILE_DIR=debug ;;
  *) echo "build-dist.sh: --profile is release or dev, not '$PROFILE'" >&2; exit 2 ;;
esac
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
DIST=$ROOT/dist
VENV=$ROOT/target/dist-venv
# cargo package verifies in target/package/<crate>/: with the workspace's target dir, the
# dependencies already built there are reused instead of rebuilt.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
mkdir -p "$DIST"
# Each part is made in STAGE and moved into dist/ only once whole (and checked).
STAGE=$(mktemp -d "$DIST/.stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

tools() {
  [ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r crates/pinstream-py/requirements-dist.txt
}

crates() {
  # Packages of a version already unpacked by an earlier verification are not unpacked again
  # (cargo keys them by name and version): drop those so the crates that depend on them are
  # built from today's packages.
  rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/pinstream*-"$VERSION"
  # Not the Python package (maturin builds its wheel) nor the tests' kit (never published).
  cargo package --workspace --exclude pinstream-py --exclude pinstream-testkit --locked $VERIFY $DIRTY
  if [ -n "$VERIFY" ]; then
    python3 scripts/check-package.py --target-dir "$CARGO_TARGET_DIR" \
      pinstream pinstream-lab pinstream-cli pinstream-capi pinstream-layer
  fi
  mkdir "$STAGE/crates"
  for c in pinstream pinstream-lab pinstream-cli pinstream-capi pinstream-layer; do
    cp "$CARGO_TARGET_DIR/package/$c-$VERSION.crate" "$STAGE/crates/"
  done
  rm -rf "$DIST/crates" && mv "$STAGE/crates" "$DIST/crates"
}

wheel() {
  # maturin finds zig on PATH (the ziglang package's `python-zig`, or `python -m ziglang`).
  PATH=$VENV/bin:$PATH "$VENV/bin/maturin" build --quiet -m crates/pinstream-py/Cargo.toml \
    --profile "$PROFILE" --zig --compatibility manylinux_2_28 -o "$STAGE/wheel"
  "$VENV/bin/python" scripts/check-wheel.py --max-glibc 2.28 "$STAGE"/wheel/*.whl
  rm -f "$DIST"/pinstream-"$VERSION"-*.whl
  mv "$STAGE"/wheel/*.whl "$DIST/"
}

sdist() {
  "$VENV/bin/maturin" sdist -m crates/pinstream-py/Cargo.toml -o "$STAGE/sdist"
  mv -f "$STAGE/sdist/pinstream-$VERSION.tar.gz" "$DIST/"
}

capi() {
  local libs=${PINSTREAM_LIB_DIR:-$CARGO_TARGET_DIR/$PROFILE_DIR}
  [ -n "${PINSTREAM_LIB_DIR:-}" ] || cargo build --locked --profile "$PROFILE" -p pinstream-capi
  local name=libpinstream-$VERSION-linux-$(uname -m)
  PINSTREAM_LIB_DIR=$libs bash scripts/install-capi.sh "$STAGE/$name" >/dev/null
  cp crates/pinstream-capi/dist-README.md "$STAGE/$name/README.md"
  cp LICENSE-MIT LICENSE-APACHE CHANGELOG.md "$STAGE/$name/"
  tar -C "$STAGE" -czf "$STAGE/$name.tar.gz" "$name"
  mv -f "$STAGE/$name.tar.gz" "$DIST/"
}

if wants wheel || wants sdist; then tools; fi
for part in crates wheel sdist capi; do
  if wants "$part"; then
    t0=$SECONDS
    "$part"
    echo "build-dist.sh: $part built in $((SECONDS - t0)) s"
  fi
done
ls -l "$DIST" "$DIST/crates" 2>/dev/null || true
