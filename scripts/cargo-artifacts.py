#!/usr/bin/env python3
"""What a cargo build made, read from its JSON messages on stdin (`--message-format=json`).

    cargo-artifacts.py tests PACKAGE    the test executables of PACKAGE, one per line
    cargo-artifacts.py cdylib PACKAGE   PACKAGE's shared library (.so / .dll)

For scripts that run what `cargo test --no-run` built instead of asking cargo again: a `cargo
test -p PACKAGE` would resolve PACKAGE's features alone and compile it again when the workspace
build unified them differently (scripts/test-under-layer.sh).
"""
import json
import sys


def artifacts(package):
    for line in sys.stdin:
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        if m.get("reason") != "compiler-artifact":
            continue
        # package_id: "path+file:///…/crates/NAME#0.1.0" (or "…#NAME@0.1.0" on older cargo)
        pid = m["package_id"]
        name = pid.rsplit("/", 1)[-1].split("#")[0]
        if "@" in pid.rsplit("#", 1)[-1]:
            name = pid.rsplit("#", 1)[-1].split("@")[0]
        if name == package:
            yield m


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("tests", "cdylib"):
        sys.exit("usage: cargo-artifacts.py tests|cdylib PACKAGE < cargo's JSON messages")
    kind, package = sys.argv[1], sys.argv[2]
    found = []
    for m in artifacts(package):
        if kind == "tests" and m.get("executable") and m["profile"]["test"]:
            found.append(m["executable"])
        if kind == "cdylib" and "cdylib" in m["target"]["kind"]:
            found += [f for f in m["filenames"] if f.endswith((".so", ".dll"))]
    if not found:
        sys.exit(f"cargo-artifacts.py: the build made no {kind} of {package}")
    print("\n".join(found))


if __name__ == "__main__":
    main()
