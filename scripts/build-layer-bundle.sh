#!/usr/bin/env bash
# Builds, on this (Debian 12) machine, what scripts/gpu-layer.sh needs on the GPU machine (which
# has no Rust and no network) into layer-bundle/ (git-ignored; name it in the device tool's carry):
#   libpinstream_layer.so      the layer, --release
#   pinstream                  the CLI, --release (`pinstream devices` reports the layer there)
#   classic_recipe             crates/pinstream-layer/c/classic_recipe.c, built with the system cc
#   ocl-icd/libOpenCL.so.1     Debian's ocl-icd 2.3.1 loader, which honours OPENCL_LAYERS (the
#                              GPU machine's default libOpenCL.so.1 is the CUDA toolkit's, which
#                              does not)
#   clpeak_*.deb               Debian 12's clpeak 1.1.2, unpacked there with dpkg -x
#   wheels/                    PyOpenCL and the three dependencies the GPU image lacks, python 3.12
# Needs: cargo, cc, ocl-icd-opencl-dev, apt lists (apt-get update) and pip with network access.
set -euo pipefail
cd "$(dirname "$0")/.."
B=layer-bundle
rm -rf "$B" && mkdir -p "$B/ocl-icd" "$B/wheels"
cargo build --release --locked -p pinstream-layer -p pinstream-cli
cp target/release/libpinstream_layer.so target/release/pinstream "$B/"
cc -O2 -Wall -Wextra -o "$B/classic_recipe" crates/pinstream-layer/c/classic_recipe.c -lOpenCL
cp "$(readlink -f /usr/lib/x86_64-linux-gnu/libOpenCL.so.1)" "$B/ocl-icd/libOpenCL.so.1"
strings "$B/ocl-icd/libOpenCL.so.1" | grep -qx OPENCL_LAYERS || { echo "this libOpenCL.so.1 has no layer support" >&2; exit 1; }
(cd "$B" && apt-get download clpeak=1.1.2-1)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$B/wheels" \
  pyopencl==2026.1.4 pytools==2026.1.1 platformdirs==4.14.9 siphash24==1.9
strip "$B/libpinstream_layer.so" "$B/pinstream" "$B/classic_recipe"
ls -la "$B" "$B/ocl-icd" "$B/wheels"
du -sh "$B"
