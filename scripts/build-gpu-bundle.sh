#!/usr/bin/env bash
# Builds what the GPU machine runs (it has no Rust toolchain): the release binary and the
# test executables, copied into gpu-bundle/ (git-ignored; name it in the device tool's carry).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release
rm -rf gpu-bundle && mkdir gpu-bundle
cp target/release/pinstream gpu-bundle/
cargo test --release --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], "gpu-bundle/test-" + m["target"]["name"])
'
strip gpu-bundle/* 2>/dev/null || true
ls -la gpu-bundle
