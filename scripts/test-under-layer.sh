#!/usr/bin/env bash
# The library's tests (crates/pinstream) with the OpenCL layer loaded by the ICD loader
# (OPENCL_LAYERS; ocl-icd >= 2.3.0, as on Debian 12), twice: as the layer is (on PoCL it passes
# everything through), and with its TEST HOOK (PINSTREAM_LAYER_TEST_FAKE_NV=1: the rewrite path
# taken, clCreateBuffer standing in for clCreateBufferNV). Both must pass unchanged, and the
# log must show the layer was loaded (and, with the hook, rewrote buffers). For .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked -p pinstream-layer
LAYER=$PWD/target/debug/libpinstream_layer.so
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

OPENCL_LAYERS=$LAYER PINSTREAM_LAYER_LOG=1 cargo test --locked -p pinstream 2>&1 | tee "$LOG"
grep -q "entered through OPENCL_LAYERS" "$LOG" || { echo "the loader did not load the layer" >&2; exit 1; }

OPENCL_LAYERS=$LAYER PINSTREAM_LAYER_LOG=1 PINSTREAM_LAYER_TEST_FAKE_NV=1 cargo test --locked -p pinstream 2>&1 | tee "$LOG"
grep -q "rewrote buffer #" "$LOG" || { echo "the layer's rewrite path was not taken" >&2; exit 1; }
echo "the library's tests pass under the layer, passing through and rewriting"
