#!/usr/bin/env bash
# The library's tests (crates/pinstream) with the OpenCL layer loaded by the ICD loader
# (OPENCL_LAYERS; ocl-icd >= 2.3.0, as on Debian 12), twice: as the layer is (on PoCL it passes
# everything through), and with its TEST HOOK (PINSTREAM_LAYER_TEST_FAKE_NV=1: the rewrite path
# taken, clCreateBuffer standing in for clCreateBufferNV). Both must pass unchanged, and the
# log must show the layer was loaded (and, with the hook, rewrote buffers). For .ci/run.
#
# It runs the test executables and the layer that the workspace's `cargo test` builds (asked of
# cargo with --no-run, which compiles nothing after .ci/run's `cargo test`): `cargo test -p
# pinstream` would resolve the library's features alone and compile it and its 19 test files a
# second time. The library's doc tests run in the workspace's `cargo test`, not here.
set -euo pipefail
cd "$(dirname "$0")/.."
LOG=$(mktemp) JSON=$(mktemp)
trap 'rm -f "$LOG" "$JSON"' EXIT
cargo test --locked --no-run --message-format=json >"$JSON"
LAYER=$(python3 scripts/cargo-artifacts.py cdylib pinstream-layer <"$JSON")

# Each of the library's test executables as cargo runs it (in the package's folder); every one
# runs, and the step fails if any failed.
run_all() {
  python3 scripts/cargo-artifacts.py run pinstream -- -q <"$JSON"
}

OPENCL_LAYERS=$LAYER PINSTREAM_LAYER_LOG=1 run_all 2>&1 | tee "$LOG"
grep -q "entered through OPENCL_LAYERS" "$LOG" || { echo "the loader did not load the layer" >&2; exit 1; }

OPENCL_LAYERS=$LAYER PINSTREAM_LAYER_LOG=1 PINSTREAM_LAYER_TEST_FAKE_NV=1 run_all 2>&1 | tee "$LOG"
grep -q "rewrote buffer #" "$LOG" || { echo "the layer's rewrite path was not taken" >&2; exit 1; }
echo "the library's tests pass under the layer, passing through and rewriting"
