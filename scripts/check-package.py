#!/usr/bin/env python3
"""Every file the compiler read to build a crate is in that crate's package.

    check-package.py [--target-dir DIR] CRATE...

`cargo package` verifies a package by compiling it again from the unpacked archive (every
crate, a few minutes of CPU in CI). What that catches is a file the build reads that the
package leaves out (an `include_str!`, a module, a file a build script names). The builds CI
has already made list those files: rustc's dep-info (`target/debug/deps/*.d`, one per crate
built) and the build scripts' `cargo:rerun-if-changed` lines. This script checks each such file
of CRATE against `cargo package --list -p CRATE`, and refuses a file read from outside the
crate's folder (the package could not carry it). Files of the toolchain, the registry and the
build output (OUT_DIR) are not the package's.
scripts/build-dist.sh runs it after `cargo package --no-verify`.
"""
import glob
import json
import os
import re
import subprocess
import sys

# Build folders and dep-info files are named for the package or crate and a 16-digit hash.
HASH = r"-[0-9a-f]{16}"


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--locked"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def packaged(name):
    out = subprocess.run(["cargo", "package", "--list", "--locked", "--allow-dirty", "-p", name],
                         check=True, capture_output=True, text=True).stdout
    return set(out.split())


def sources(d):
    """The sources a dep-info file lists, the crate root first."""
    out = []
    with open(d) as f:
        for line in f:
            # "OUTPUT: SRC SRC ..." lines, then "SRC:" lines; spaces escaped as "\ ".
            if ":" not in line or line.startswith("#"):
                continue
            _, _, deps = line.partition(": ")
            out += [p.replace("\0", " ") for p in deps.replace("\\ ", "\0").split()]
    return out


def dep_info_files(target, crate_names, package, crate_dir, root):
    """The sources listed by the dep-info files of the crate's targets (a file named for the
    crate but compiled from another package's root, such as the CLI's binary `pinstream`
    beside the library `pinstream`, is not the crate's) and of its build script."""
    read, found = set(), 0
    named = [d for name in crate_names
             for d in glob.glob(os.path.join(target, "debug", "deps", f"{name}-*.d"))
             if re.fullmatch(re.escape(name) + HASH + r"\.d", os.path.basename(d))]
    named += [d for d in glob.glob(os.path.join(target, "debug", "build", f"{package}-*",
                                                 "build_script_build-*.d"))
              if re.fullmatch(re.escape(package) + HASH,
                              os.path.basename(os.path.dirname(d)))]
    for d in named:
        listed = sources(d)
        first = listed[0] if listed else ""
        first = os.path.realpath(first if os.path.isabs(first) else os.path.join(root, first))
        if not first.startswith(crate_dir + os.sep):
            continue
        found += 1
        read.update(listed)
    return read, found


def build_script_files(target, package, crate_dir):
    read = set()
    for out in glob.glob(os.path.join(target, "debug", "build", f"{package}-*", "output")):
        if not re.fullmatch(re.escape(package) + HASH, os.path.basename(os.path.dirname(out))):
            continue
        with open(out) as f:
            for line in f:
                for key in ("cargo:rerun-if-changed=", "cargo::rerun-if-changed="):
                    if line.startswith(key):
                        read.add(os.path.join(crate_dir, line[len(key):].strip()))
    return read


def check(pkg, target, root):
    crate_dir = os.path.dirname(pkg["manifest_path"])
    names = {t["name"].replace("-", "_") for t in pkg["targets"]
             if set(t["kind"]) & {"lib", "rlib", "cdylib", "staticlib", "bin", "proc-macro",
                                  "custom-build"}}
    read, found = dep_info_files(target, names, pkg["name"], crate_dir, root)
    if found == 0:
        return [f"{pkg['name']}: no dep-info under {target}/debug/deps: build it first"]
    read |= build_script_files(target, pkg["name"], crate_dir)
    listed = packaged(pkg["name"])
    problems = []
    for p in sorted(read):
        full = os.path.realpath(p if os.path.isabs(p) else os.path.join(root, p))
        if full.startswith(os.path.realpath(target) + os.sep) or not full.startswith(root + os.sep):
            continue  # build output, the toolchain, the registry
        if os.path.basename(full) == "Cargo.toml" or (os.sep + ".git" + os.sep) in full:
            # Manifests (cargo lists them for the [lints] table; the package's is rewritten by
            # cargo package) and the repository's state (the CLI's build script reads the
            # commit where there is one; a package has none and says so).
            continue
        if not (full.startswith(crate_dir + os.sep) or full == crate_dir):
            problems.append(f"{pkg['name']}: reads {os.path.relpath(full, root)}, outside its folder: the package cannot carry it")
            continue
        rel = os.path.relpath(full, crate_dir)
        if os.path.isdir(full):
            if not any(f == rel or f.startswith(rel + "/") for f in listed):
                problems.append(f"{pkg['name']}: its build script watches {rel}/, which its package leaves out")
        elif os.path.isfile(full) and rel not in listed:
            problems.append(f"{pkg['name']}: reads {rel}, which its package leaves out (Cargo.toml `include`/`exclude`)")
    return problems


def main():
    args = sys.argv[1:]
    meta = metadata()
    target = meta["target_directory"]
    if args[:1] == ["--target-dir"]:
        target, args = os.path.realpath(args[1]), args[2:]
    if not args:
        sys.exit(__doc__)
    root = os.path.realpath(meta["workspace_root"])
    by_name = {p["name"]: p for p in meta["packages"]}
    problems = []
    for name in args:
        if name not in by_name:
            sys.exit(f"check-package.py: no crate {name} in the workspace")
        problems += check(by_name[name], target, root)
    for p in problems:
        print(f"check-package.py: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"check-package.py: every file the builds of {', '.join(args)} read is in its package")


if __name__ == "__main__":
    main()
