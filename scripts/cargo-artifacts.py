#!/usr/bin/env python3
"""What a cargo build made, read from its JSON messages on stdin (`--message-format=json`).

    cargo-artifacts.py tests PACKAGE    the test executables of PACKAGE, one per line
    cargo-artifacts.py cdylib PACKAGE   PACKAGE's shared library (.so / .dll)
    cargo-artifacts.py run [--runner CMD] PACKAGE [NAME...] [-- ARGS...]
                                        runs PACKAGE's test executables (those of the targets
                                        NAME..., else all) in PACKAGE's folder, as cargo runs
                                        them, with ARGS, under CMD (e.g. wine) where given;
                                        every one runs, and the exit code is 1 if any failed

For scripts that run what `cargo test --no-run` built instead of asking cargo again: a `cargo
test -p PACKAGE` would resolve PACKAGE's features alone and compile it again when the workspace
build unified them differently (.ci/run, scripts/test-under-layer.sh, scripts/test-windows.sh).
"""
import json
import os
import re
import subprocess
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


USAGE = """usage: cargo-artifacts.py tests|cdylib PACKAGE < cargo's JSON messages
       cargo-artifacts.py run [--runner CMD] PACKAGE [NAME...] [-- ARGS...] < cargo's JSON"""


def run(argv):
    runner = []
    if argv[:1] == ["--runner"]:
        if len(argv) < 2:
            sys.exit(USAGE)
        runner, argv = argv[1].split(), argv[2:]
    args = []
    if "--" in argv:
        argv, args = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    if not argv:
        sys.exit(USAGE)
    package, names = argv[0], argv[1:]
    tests = [
        (m["executable"], os.path.dirname(m["manifest_path"]))
        for m in artifacts(package)
        if m.get("executable") and m["profile"]["test"]
    ]
    chosen = tests
    if names:
        chosen = []
        for n in names:
            pattern = re.escape(n) + r"-[0-9a-f]{16}(\.exe)?"
            hit = [t for t in tests if re.fullmatch(pattern, os.path.basename(t[0]))]
            if len(hit) != 1:
                sys.exit(f"cargo-artifacts.py: {len(hit)} test executables of {package} "
                         f"named {n}, not one")
            chosen += hit
    if not chosen:
        sys.exit(f"cargo-artifacts.py: the build made no tests of {package}")
    failed = 0
    for exe, folder in chosen:
        print(f"== {package}: {os.path.basename(exe)}", flush=True)
        if subprocess.run(runner + [exe] + args, cwd=folder).returncode != 0:
            failed = 1
    return failed


def main():
    if sys.argv[1:2] == ["run"]:
        sys.exit(run(sys.argv[2:]))
    if len(sys.argv) != 3 or sys.argv[1] not in ("tests", "cdylib"):
        sys.exit(USAGE)
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
