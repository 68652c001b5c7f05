#!/usr/bin/env bash
# Builds what the GPU machine runs (it has no Rust toolchain): the release binary and the
# test executables, copied into OUT_DIR (default gpu-bundle/, git-ignored; name it in the
# device tool's carry).
#   scripts/build-gpu-bundle.sh [OUT_DIR] [REV]
# With REV (a commit, e.g. d778dd6 for scripts/gpu-redesign.sh's "before"), the binary alone is
# built from that commit's tree (exported with `git archive` into target/bundle-src-REV, built
# into target/bundle-REV), so two bundles can be compared on the same machine.
# NO_TESTS=1 skips the test executables (smaller bundles).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-bundle}
REV=${2:-}
rm -rf "$OUT" && mkdir -p "$OUT"
if [ -n "$REV" ]; then
  SRC=target/bundle-src-$REV
  rm -rf "$SRC" && mkdir -p "$SRC"
  git archive "$REV" | tar -x -C "$SRC"
  (cd "$SRC" && CARGO_TARGET_DIR="$PWD/../bundle-$REV" cargo build --release --locked)
  cp "target/bundle-$REV/release/pinstream" "$OUT/"
  git rev-parse "$REV" > "$OUT/COMMIT"
else
  cargo build --release --locked
  cp target/release/pinstream "$OUT/"
  { git rev-parse HEAD; git status --porcelain | sed 's/^/dirty: /'; } > "$OUT/COMMIT"
  if [ -z "${NO_TESTS:-}" ]; then
    # Every test executable: the integration tests (test-NAME) and each crate's unit tests
    # (unit-lib-CRATE, unit-bin-NAME), with the libraries some of them load from beside themselves (the C
    # library's and the layer's), and the tree they were built in: tests that compile C
    # programs name their sources by that absolute path, so scripts/gpu-tests.sh links it to
    # the copy on the GPU machine.
    cargo test --release --locked --workspace --no-run --message-format=json 2>/dev/null |
      python3 -c '
import json, os, sys, shutil
out = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact":
        continue
    t = m["target"]
    if m.get("executable") and m["profile"]["test"]:
        kind = t["kind"][0] if t["kind"] in (["test"], ["bin"]) else "lib"
        name = ("test-" + t["name"]) if kind == "test" else ("unit-" + kind + "-" + t["name"])
        # Two crates may have test files of one name (tests/storage.rs): the second keeps its
        # crate in its name, so neither replaces the other.
        if os.path.exists(out + "/" + name):
            crate = os.path.basename(os.path.dirname(m["manifest_path"]))
            name = name.replace("test-", "test-" + crate.replace("-", "_") + "__", 1)
        shutil.copy(m["executable"], out + "/" + name)
' "$OUT"
    pwd > "$OUT/BUILD_ROOT"
  fi
  # The C library and the layer, with or without the tests (gpu-vulkan.sh builds a C program
  # against the former).
  cargo build --release --locked -p pinstream-capi -p pinstream-layer
  cp target/release/libpinstream_capi.so target/release/libpinstream_capi.a \
    target/release/libpinstream_layer.so "$OUT/"
  # Where a zero-copy call's host time goes, on one thread and split (scripts/gpu-mapped.sh).
  cargo build --release --locked -p pinstream --example zero_copy_timeline
  cp target/release/examples/zero_copy_timeline "$OUT/"
fi
# Debian's Vulkan loader: the GPU machine has NVIDIA's Vulkan driver but no loader
# (scripts/gpu-common.sh's use_nvidia_vulkan puts BIN_DIR/vulkan on LD_LIBRARY_PATH).
mkdir -p "$OUT/vulkan"
# Without them every Vulkan test fails on the GPU machine (seen: a bundle built where libvulkan1
# was missing), so a bundle is not made without them.
cp -L /usr/lib/x86_64-linux-gnu/libvulkan.so.1 "$OUT/vulkan/" \
  || { echo "no libvulkan.so.1 here: apt-get install libvulkan1 (the GPU machine has no Vulkan loader)" >&2; exit 1; }
# and its headers (libvulkan-dev), which the C suite's Vulkan program includes
# (tests/c/test_vulkan.c; use_nvidia_vulkan puts them on CPATH).
mkdir -p "$OUT/vulkan-include/vulkan"
{ cp -L /usr/include/vulkan/*.h "$OUT/vulkan-include/vulkan/" && cp -rL /usr/include/vk_video "$OUT/vulkan-include/"; } \
  || { echo "no Vulkan headers here: apt-get install libvulkan-dev (the C suite's Vulkan program includes them)" >&2; exit 1; }
# The test executables keep their symbol table (only debug sections go), so a stack taken on
# the GPU machine names its functions (scripts/hang-stacks.sh).
strip "$OUT"/pinstream "$OUT"/*.so 2>/dev/null || true
strip --strip-debug "$OUT"/test-* "$OUT"/unit-* 2>/dev/null || true
strip --strip-debug "$OUT"/*.a 2>/dev/null || true
ls -la "$OUT"
# One compressed file for the device tool's carry (64 MiB at most).
tar -cJf "$OUT.tar.xz" "$OUT"
ls -la "$OUT.tar.xz"
