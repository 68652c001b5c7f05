#!/usr/bin/env python3
"""Checks that every Rust path a doc names in backticks exists in the workspace's sources.

    scripts/check-doc-paths.py docs/architecture.md [MORE.md ...]
    scripts/check-doc-paths.py --self-test

A path is a backticked `a::b::c` or `a::{b, c}`: its first segment is a crate
(`pinstream_cli::advice`) or a module of any crate's `src/` (`engine::ring`, `tools::soak`).
Each segment is walked as a module (`seg.rs` or `seg/mod.rs`) while one exists; what is left
must be an item the last module defines or re-exports (`fn`, `struct`, `enum`, `trait`, `type`,
`const`, `static`, `mod`, a `use` that names it), and a segment after that an item of the same
file (a method or a variant). A path that no crate resolves is reported with its line, and the
exit code is 1, so the architecture document cannot name a module that is gone (issue 35).
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PATH = re.compile(r"`((?:[A-Za-z_][A-Za-z0-9_]*::)+(?:\{[^}`]*\}|[A-Za-z_][A-Za-z0-9_]*))`")


def crates(root):
    """{crate name: its src directory} for every crate under crates/."""
    out = {}
    base = os.path.join(root, "crates")
    for d in sorted(os.listdir(base)):
        src = os.path.join(base, d, "src")
        if os.path.isdir(src):
            out[d.replace("-", "_")] = src
    return out


def module_file(dirpath, name):
    """The file of module `name` in `dirpath` (name.rs or name/mod.rs), or None."""
    for f in (os.path.join(dirpath, name + ".rs"), os.path.join(dirpath, name, "mod.rs")):
        if os.path.isfile(f):
            return f
    return None


def children_dir(f):
    """Where a module file's children live: beside mod.rs/lib.rs, else in a folder of its name."""
    if os.path.basename(f) in ("mod.rs", "lib.rs", "main.rs"):
        return os.path.dirname(f)
    return f[:-3]


def defines(f, name):
    """Whether file f defines or re-exports `name`."""
    text = open(f, encoding="utf-8").read()
    item = r"\b(fn|struct|enum|trait|type|const|static|mod|union|macro_rules!)\s+" + re.escape(name) + r"\b"
    if re.search(item, text):
        return True
    # a variant or a re-export: `Name,` `Name(` `Name {` in an enum, `use ...Name` / `as Name`
    if re.search(r"\buse\b[^;]*\b" + re.escape(name) + r"\b[^;]*;", text, re.S):
        return True
    return bool(re.search(r"^\s*" + re.escape(name) + r"\s*[,({]", text, re.M))


def resolves(src, segments):
    f = os.path.join(src, "lib.rs")
    if not os.path.isfile(f):
        f = os.path.join(src, "main.rs")
    i = 0
    while i < len(segments):
        child = module_file(children_dir(f), segments[i])
        if child is None:
            break
        f, i = child, i + 1
    rest = segments[i:]
    if not rest:
        return True
    return all(defines(f, s) for s in rest[:2]) and len(rest) <= 2


def expand(path):
    """`a::{b, c::d}` gives [[a, b], [a, c, d]]; `a::b` gives [[a, b]]."""
    head, _, tail = path.partition("{")
    base = [s for s in head.split("::") if s]
    if not tail:
        return [base]
    return [base + [s for s in part.strip().split("::") if s] for part in tail.rstrip("}").split(",") if part.strip()]


def check(doc, root=ROOT):
    all_crates = crates(root)
    problems = []
    for n, line in enumerate(open(doc, encoding="utf-8"), 1):
        for m in PATH.finditer(line):
            for segs in expand(m.group(1)):
                if segs[0] in all_crates:
                    ok = resolves(all_crates[segs[0]], segs[1:])
                elif segs[0] in ("std", "core", "alloc", "cl3", "cudarc", "ash", "pyo3", "clap"):
                    continue  # a dependency's path, not ours
                else:
                    ok = any(resolves(src, segs) for src in all_crates.values())
                if not ok:
                    problems.append(f"{doc}:{n}: `{'::'.join(segs)}` names no module or item in crates/*/src")
    return problems


def self_test():
    import tempfile

    with tempfile.TemporaryDirectory() as t:
        src = os.path.join(t, "crates", "lib-a", "src")
        os.makedirs(os.path.join(src, "engine"))
        open(os.path.join(src, "lib.rs"), "w").write("pub mod engine;\npub use engine::Run;\n")
        open(os.path.join(src, "engine", "mod.rs"), "w").write("mod ring;\npub struct Run;\npub use ring::go;\n")
        open(os.path.join(src, "engine", "ring.rs"), "w").write("pub fn go() {}\npub enum E {\n    Full,\n}\n")
        doc = os.path.join(t, "a.md")
        open(doc, "w").write(
            "`engine::{ring, Run}` `engine::ring::go` `lib_a::engine::ring::E::Full` `std::fs::File`\n"
            "`engine::twin` `engine::ring::gone` `tools::{ring}`\n"
        )
        got = check(doc, t)
        want = ["engine::twin", "engine::ring::gone", "tools::ring"]
        found = [p.split("`")[1] for p in got]
        assert found == want, got
    print("check-doc-paths: self-test passed")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    problems = [p for doc in argv[1:] for p in check(doc)]
    for p in problems:
        print(p)
    print(f"check-doc-paths: {len(problems)} path(s) that name nothing in {len(argv) - 1} doc(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
