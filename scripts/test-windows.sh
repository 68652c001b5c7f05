#!/usr/bin/env bash
# Windows, cross-built and tested under Wine (issue 11). Installs mingw-w64 and Wine (Debian
# 12's Wine 8.0) and the Rust target, lints the crates that build for Windows, builds the CLI
# and the C library (a DLL and its import library), and runs the library's and the CLI's
# tests and the C library's C program under Wine on PoCL: Wine's opencl.dll forwards to the
# host's libOpenCL.so.1.
#   scripts/test-windows.sh [--no-python-lint]
# --no-python-lint leaves out the Python package's `cargo clippy` (.ci/run runs it in its docs
# job, which has time to spare).
# The whole workspace must build for Windows (issue 21 class 13): pinstream-layer compiles there
# as its pure parts only (an LD_PRELOAD / ICD-loader layer is Linux by nature; its FFI and tests
# are cfg(unix)), and pinstream-py is checked but not run (its wheel is built by maturin per
# platform; no Windows Python under Wine here). What Wine cannot show is listed in
# docs/windows.md.
set -euo pipefail
cd "$(dirname "$0")/.."
T=x86_64-pc-windows-gnu
PY_LINT=1
case "${1:-}" in
  "") ;;
  --no-python-lint) PY_LINT="" ;;
  *) echo "test-windows.sh: unknown argument '$1' (the only one is --no-python-lint)" >&2; exit 2 ;;
esac
# Each step's wall and CPU time (ci/step.sh), summed up at the end.
source ci/step.sh
# CARGO_TARGET_DIR, when set (.ci/run: target/windows), holds the builds and the Wine prefix.
TD=${CARGO_TARGET_DIR:-$PWD/target}

missing=""
for p in gcc-mingw-w64-x86-64 wine wine64; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $missing >/dev/null
fi
rustup target list --installed | grep -qx "$T" || rustup target add "$T"

# One build of every target of every crate (the layer as its pure parts), linted as it builds:
# clippy-driver is the workspace's compiler wrapper, as in .ci/run, so every crate built runs
# clippy's lints with -D warnings, and nothing is compiled twice (a `cargo clippy` pass
# checked every dependency and crate again: ~170 s of CPU). The tests below run the executables
# this build made (a `cargo test -p` of one package would resolve its features alone and build
# the library again). The Python package is only linted: its wheel is built by maturin per
# platform, and no Windows Python runs under Wine here.
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
RUSTC_WORKSPACE_WRAPPER=$(command -v clippy-driver)
mkdir -p "$TD"
JSON="$TD/windows-tests.json"
build_tests() {
  cargo test --locked --target "$T" --workspace --exclude pinstream-py --all-targets --no-run \
    --message-format=json-render-diagnostics >"$JSON"
}
step build_tests
[ -z "$PY_LINT" ] || step cargo clippy --locked --target "$T" -p pinstream-py --all-targets -- -D warnings
# The CLI, and the C library's DLL, import library and archive (a test build leaves the
# libraries in deps/).
for f in pinstream.exe deps/pinstream_capi.dll deps/libpinstream_capi.dll.a deps/libpinstream_capi.a; do
  test -s "$TD/$T/debug/$f" || { echo "missing $TD/$T/debug/$f" >&2; exit 1; }
done

# A Wine prefix of our own, with the ProcessPrng shim: Rust's std (1.78+) imports it from
# bcryptprimitives.dll, which Wine 8.0 lacks (rust-lang/rust#121337).
export WINEPREFIX="$TD/wine-prefix" WINEDEBUG=-all
[ -f "$WINEPREFIX/system.reg" ] || wineboot -i >/dev/null 2>&1
# One wineserver for the whole run: each test executable otherwise starts its own, and a
# server shutting down as the next executable connects fails it ("wine client error: recvmsg:
# Connection reset by peer", seen once here).
# wineboot's own server, if it is still up, exits first (in seconds); a persistent one left on
# this prefix by an earlier run by hand would never exit: it is stopped.
timeout 60 wineserver -w || { echo "stopping a wineserver left running on $WINEPREFIX"; wineserver -k; }
wineserver -p
trap 'wineserver -k 2>/dev/null || true; rm -f "$STEP_TMP"' EXIT
x86_64-w64-mingw32-gcc -O2 -shared -o "$TD/$T/bcryptprimitives.dll" \
  ci/wine-shim/bcryptprimitives.c ci/wine-shim/bcryptprimitives.def -lbcrypt
cp "$TD/$T/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"
wine "$TD/$T/debug/pinstream.exe" --version

# wtests PACKAGE NAME... [-- ARGS]: runs PACKAGE's test executables NAME (an integration
# test's file name, or the crate's name for its unit tests: pinstream_cli for the CLI's library,
# pinstream for its binary) that the build above made, each under Wine in the package's folder
# as `cargo test` runs it, with ARGS; every one runs, and the step fails if any failed.
wtests() {
  python3 scripts/cargo-artifacts.py run --runner wine "$@" <"$JSON"
}
# One rayon worker under Wine: Wine 8 sometimes kills a process with SIGQUIT at exit while
# several rayon workers (the gather's packing pool) are parked; the gather's test binary ended
# so in 4 of 12 runs after passing every test, and in none of 10 with one worker. Real
# Windows ends a process's threads itself; the code paths are the same with one worker.
export RAYON_NUM_THREADS=1
# The library's tests. tests/adopt.rs runs on one thread: under Wine, several threads making
# their first clGetDeviceIDs calls at once through Wine's opencl.dll get no device (never seen
# natively); and its two-device test (ignored on Windows, the mark says why) runs with the
# variables set from outside, since Wine does not pass a child's POCL_DEVICES on to PoCL.
# One unit test is left out: Wine's opencl.dll answers clSetMemObjectDestructorCallback with
# CL_INVALID_OPERATION (it forwards no callbacks), so USE_HOST_PTR mapped memory (Intel
# integrated GPUs' zero-copy mechanism, whose pages the callback frees) is refused under Wine;
# Windows' own OpenCL drivers take the callback. docs/windows.md lists it. The Vulkan backend's
# unit tests that need a device are left out too: Wine 8's vulkan-1.dll offers Vulkan 1.0, and
# the backend needs 1.2 (it says so, and those tests expect lavapipe, as on Linux). tests/storage.rs runs
# here for its Windows file I/O (FILE_FLAG_NO_BUFFERING, positional reads and writes).
step wtests pinstream pinstream concurrency devices library release small_transfers stream \
  gather progressive progressive_fault gather_fault storage -- \
  --skip backend::opencl::zerocopy::tests::use_host_ptr_pages_outlive_the_allocation_while_the_buffer_is_held \
  --skip backend::vulkan::queue::tests::
step wtests pinstream adopt -- --test-threads=1
POCL_DEVICES="pthread pthread" PINSTREAM_TEST_TWO_DEVICES=1 \
  step wtests pinstream adopt -- --ignored --exact a_context_with_two_devices_pins_for_both \
  on_device_takes_the_device_of_a_queue_on_the_other_of_two_devices
# The CLI's tests, the files whose code differs on Windows: the CLI's own unit tests (signals,
# the output files), cli (devices and doctor: the platform's loader and memory report), run_cli,
# hostile_inputs and progressive_cli (files and paths: Windows' sharing and rename rules),
# reliability (Ctrl-C, Ctrl-Break), soak (resident memory: GetProcessMemoryInfo), bench_cli
# (compare's process CPU time: GetProcessTimes; host room: GlobalMemoryStatusEx), and
# messages_cli, fault_hook, applies_cli and cuda (1-3 s each under Wine).
# Left to Linux, as no code they reach branches on the platform (the pieces below them that do
# are run here): fuzz_run (64 random kernels through `run`'s checks, 20-35 s under Wine),
# devices_cli (the engine over two devices, ~30 s: Windows' part, two devices through Wine's
# opencl.dll, is adopt's two-device test above); hostile_outputs (FIFOs, devices, links) and
# cgroup_limit (memory cgroups) are unix only.
# What Windows lacks (POSIX signals sent with kill(1), /dev paths, setpriv, prlimit) is marked in
# the files with the reason (`cfg_attr(windows, ignore = "...")`).
# The lab's unit tests (the measuring tools; doctor's pin search reads the platform).
step wtests pinstream-lab pinstream_lab
step wtests pinstream-cli pinstream_cli pinstream cli cuda hostile_inputs reliability run_cli \
  soak progressive_cli applies_cli messages_cli fault_hook bench_cli
# The C library from C: the C suite's program (crates/pinstream-capi/tests/c/test_capi.c; its
# unix mappings test is not built for Windows) cross-compiled with mingw-w64 against the DLL's
# import library and one for OpenCL.dll made from ci/windows-capi/OpenCL.def (mingw ships
# none), with the Khronos headers from /usr/include/CL (ocl-icd-opencl-dev), run under Wine
# beside the DLL. No AddressSanitizer here (mingw has none).
W="$TD/$T/capi-test"
rm -rf "$W"
mkdir -p "$W/CL"
cp /usr/include/CL/*.h "$W/CL/"
x86_64-w64-mingw32-dlltool -d ci/windows-capi/OpenCL.def -l "$W/libOpenCL.a"
x86_64-w64-mingw32-gcc -O1 -Wall -Werror -I"$W" -Icrates/pinstream-capi/include \
  crates/pinstream-capi/tests/c/test_capi.c -o "$W/test_capi.exe" \
  "$TD/$T/debug/deps/libpinstream_capi.dll.a" -L"$W" -lOpenCL -static -lpthread
cp "$TD/$T/debug/deps/pinstream_capi.dll" "$W/"
step wine "$W/test_capi.exe"
step_summary windows
