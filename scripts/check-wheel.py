#!/usr/bin/env python3
"""Checks a Linux wheel against the manylinux policy its tag claims, as auditwheel does for
glibc: every manylinux tag (file name and WHEEL) is at most --max-glibc, and no shared library
inside needs a glibc symbol version newer than the oldest tag names.

    scripts/check-wheel.py --max-glibc 2.28 dist/pinstream-*.whl
    scripts/check-wheel.py --self-test
"""

import argparse
import re
import sys
import zipfile

TAG = re.compile(r"manylinux_(\d+)_(\d+)_")
LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
SYMBOL = re.compile(rb"GLIBC_(\d+)\.(\d+)(?:\.\d+)?\x00")


def tag_glibc(tag):
    """The glibc version a platform tag promises to run on, or None for a non-manylinux tag."""
    m = TAG.match(tag)
    if m:
        return int(m.group(1)), int(m.group(2))
    return next((v for k, v in LEGACY.items() if tag.startswith(k + "_")), None)


def needed_glibc(elf_bytes):
    """The newest GLIBC_x.y version an ELF file's symbol versions name ((0, 0) if none)."""
    found = [(int(a), int(b)) for a, b in SYMBOL.findall(elf_bytes)]
    return max(found, default=(0, 0))


def wheel_tags(whl):
    """The platform tags of the file name and of the WHEEL metadata."""
    name_tags = whl.rsplit("/", 1)[-1][:-len(".whl")].split("-")[-1].split(".")
    with zipfile.ZipFile(whl) as z:
        wheel = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        meta = z.read(wheel).decode()
    meta_tags = [t.split("-")[-1] for t in re.findall(r"^Tag: (\S+)$", meta, re.M)]
    return name_tags, meta_tags


def problems(whl, max_glibc):
    """What is wrong with the wheel against the policy (empty when it passes)."""
    name_tags, meta_tags = wheel_tags(whl)
    out = []
    if sorted(set(name_tags)) != sorted(set(meta_tags)):
        out.append(f"file name tags {name_tags} differ from WHEEL's {meta_tags}")
    promised = [tag_glibc(t) for t in name_tags]
    if not promised or None in promised:
        return out + [f"tags {name_tags}: not all manylinux (build with maturin --zig "
                      "--compatibility manylinux_2_28)"]
    if max(promised) > max_glibc:
        out.append(f"tags {name_tags} need glibc newer than {fmt(max_glibc)}")
    with zipfile.ZipFile(whl) as z:
        for n in (n for n in z.namelist() if ".so" in n.rsplit("/", 1)[-1]):
            need = needed_glibc(z.read(n))
            if need > min(promised):
                out.append(f"{n} needs GLIBC_{fmt(need)}, newer than its tag's {fmt(min(promised))}")
    return out


def fmt(v):
    return f"{v[0]}.{v[1]}"


def self_test():
    assert tag_glibc("manylinux_2_28_x86_64") == (2, 28)
    assert tag_glibc("manylinux2014_x86_64") == (2, 17)
    assert tag_glibc("linux_x86_64") is None
    elf = b"\x00GLIBC_2.2.5\x00GLIBC_2.28\x00GLIBC_2.17\x00"
    assert needed_glibc(elf) == (2, 28)
    assert needed_glibc(elf + b"GLIBC_2.34\x00") == (2, 34)
    assert needed_glibc(b"GLIBC_PRIVATE\x00") == (0, 0)
    print("check-wheel.py: self-test passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-glibc", default="2.28", help="newest glibc a tag may name")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("wheels", nargs="*")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    limit = tuple(int(x) for x in a.max_glibc.split("."))
    bad = 0
    for whl in a.wheels:
        errs = problems(whl, limit)
        for e in errs:
            print(f"check-wheel.py: {whl}: {e}", file=sys.stderr)
        bad += bool(errs)
        if not errs:
            print(f"check-wheel.py: {whl}: manylinux glibc <= {a.max_glibc}, symbols agree")
    sys.exit(1 if bad or not a.wheels else 0)


if __name__ == "__main__":
    main()
