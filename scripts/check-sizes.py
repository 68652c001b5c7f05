#!/usr/bin/env python3
"""Issue 35's size limits, so they cannot drift: every non-test function of the crates' src/
at most 60 lines (signature to closing brace), and every non-test source file at most 600.

Test code is left out: `#[cfg(test)]` items (a `mod tests { ... }` block, or a `mod NAME;`
whose file is then a test file), files named tests.rs or *_tests.rs, and crates' tests/.
A function is a line starting (after indentation) with `fn` or `pub ... fn`, up to the next
line that is its indentation and `}` (rustfmt's shape).

  scripts/check-sizes.py [ROOT]      exit 1 and one line per excess
  scripts/check-sizes.py --self-test
"""
import pathlib
import re
import sys

MAX_FN, MAX_FILE = 60, 600
FN = re.compile(r'^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')
CFG_TEST = re.compile(r'^\s*#\[cfg\((test|all\(test[^)]*\))\)\]')
MOD_DECL = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;')


def block_end(lines, start, indent):
    """The index of the line that is `indent}` after `start` (len(lines) if none)."""
    k = start
    while k < len(lines) and lines[k] != indent + "}":
        k += 1
    return k


def functions(text):
    """(lines, name, first line) of each non-test function in `text`."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        if CFG_TEST.match(lines[i]) and i + 1 < len(lines) and lines[i + 1].rstrip().endswith("{"):
            indent = re.match(r"^(\s*)", lines[i + 1]).group(1)
            i = block_end(lines, i + 2, indent) + 1
            continue
        m = FN.match(lines[i])
        if m:
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = block_end(lines, j + 1, m.group(1))
                out.append((k - i + 1, m.group(8), i + 1))
                i = j + 1
                continue
        i += 1
    return out


def test_modules(path, text):
    """The files `#[cfg(test)] mod NAME;` lines in `path` (`text`) make test files."""
    lines, out = text.splitlines(), []
    base = path.parent if path.name in ("mod.rs", "lib.rs", "main.rs") else path.with_suffix("")
    for a, b in zip(lines, lines[1:]):
        m = MOD_DECL.match(b)
        if CFG_TEST.match(a) and m:
            out += [base / f"{m.group(3)}.rs", base / m.group(3) / "mod.rs"]
    return out


def excesses(root):
    files = sorted(root.glob("crates/*/src/**/*.rs"))
    texts = {p: p.read_text() for p in files}
    tests = {t for p, t in texts.items() for t in test_modules(p, t)}
    out = []
    for p, text in texts.items():
        if p in tests or p.name == "tests.rs" or p.name.endswith("_tests.rs"):
            continue
        rel = p.relative_to(root)
        n = len(text.splitlines())
        if n > MAX_FILE:
            out.append(f"{rel}: {n} lines (at most {MAX_FILE}): split it into cohesive modules")
        for lines, name, line in functions(text):
            if lines > MAX_FN:
                out.append(f"{rel}:{line}: fn {name} is {lines} lines (at most {MAX_FN}): split it")
    return out


def self_test():
    body = "\n".join(["    x();"] * 61)
    long_fn = f"fn long() {{\n{body}\n}}\n"
    assert functions(long_fn) == [(63, "long", 1)], functions(long_fn)
    short = "pub(crate) fn short(\n    a: u8,\n) -> u8 {\n    a\n}\n"
    assert functions(short) == [(5, "short", 1)]
    tested = f"#[cfg(test)]\nmod tests {{\n    {long_fn.replace(chr(10), chr(10) + '    ')}\n}}\n"
    assert functions(tested) == [], functions(tested)
    assert functions("trait T {\n    fn decl(&self);\n}\n") == []
    p = pathlib.Path("/r/crates/c/src/a/mod.rs")
    assert test_modules(p, "#[cfg(test)]\nmod texts;\n") == [p.parent / "texts.rs", p.parent / "texts" / "mod.rs"]
    q = pathlib.Path("/r/crates/c/src/b.rs")
    assert test_modules(q, "#[cfg(test)]\nmod t;\nmod u;\n")[0] == pathlib.Path("/r/crates/c/src/b/t.rs")
    print("check-sizes self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    found = excesses(root)
    for line in found:
        print(line)
    print(f"check-sizes: {len(found)} excess(es)", file=sys.stderr)
    sys.exit(1 if found else 0)
