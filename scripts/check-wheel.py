#!/usr/bin/env python3
"""Checks a Linux wheel against the manylinux policy its tag claims, as auditwheel does: every
manylinux tag (file name and WHEEL) is at most --max-glibc, no shared library inside needs a
glibc symbol version newer than the oldest tag names, and each links only libraries the
policy lets a wheel assume (its DT_NEEDED entries, read with readelf from binutils).

    scripts/check-wheel.py --max-glibc 2.28 dist/pinstream-*.whl
    scripts/check-wheel.py --self-test
"""

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile

TAG = re.compile(r"manylinux_(\d+)_(\d+)_")
LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
SYMBOL = re.compile(rb"GLIBC_(\d+)\.(\d+)(?:\.\d+)?\x00")
# The libraries every manylinux policy lets a wheel link without bundling them (PEP 600's
# policies as auditwheel lists them; the X11/GL ones left out: pinstream needs none).
ALLOWED = {"libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libdl.so.2", "librt.so.1",
           "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libresolv.so.2",
           "libz.so.1", "libexpat.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


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


def needed_libraries(elf_bytes):
    """The DT_NEEDED entries of an ELF file."""
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(elf_bytes)
        f.flush()
        out = subprocess.run(["readelf", "-d", f.name], capture_output=True, text=True,
                             check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


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
        out.append(f"tags {name_tags} need glibc newer than {fmt(max_glibc)} (build with "
                   "scripts/build-dist.sh: maturin --zig --compatibility manylinux_2_28)")
    with zipfile.ZipFile(whl) as z:
        for n in (n for n in z.namelist() if ".so" in n.rsplit("/", 1)[-1]):
            elf = z.read(n)
            need = needed_glibc(elf)
            if need > min(promised):
                out.append(f"{n} needs GLIBC_{fmt(need)}, newer than its tag's {fmt(min(promised))}")
            extra = sorted(set(needed_libraries(elf)) - ALLOWED)
            if extra:
                out.append(f"{n} links {extra}, which the manylinux policy does not allow")
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
    with open(sys.executable, "rb") as f:
        elf = f.read()
    assert "libc.so.6" in needed_libraries(elf)
    with tempfile.TemporaryDirectory() as d:
        too_new = fake_wheel(d, "manylinux_2_34_x86_64", "manylinux_2_34_x86_64", elf)
        assert any("need glibc newer than 2.28" in p for p in problems(too_new, (2, 28)))
        symbols = fake_wheel(d, "manylinux_2_28_x86_64", "manylinux_2_28_x86_64",
                             elf + b"GLIBC_2.99\x00")
        assert any("needs GLIBC_2.99" in p for p in problems(symbols, (2, 28)))
        differ = fake_wheel(d, "manylinux_2_28_x86_64", "linux_x86_64", b"")
        assert any("differ from WHEEL" in p for p in problems(differ, (2, 28)))
    print("check-wheel.py: self-test passed")


def fake_wheel(folder, name_tag, wheel_tag, elf):
    """A wheel file named with `name_tag` whose WHEEL says `wheel_tag`, holding `elf`."""
    path = f"{folder}/x-1.0-cp311-abi3-{name_tag}.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x-1.0.dist-info/WHEEL", f"Tag: cp311-abi3-{wheel_tag}\n")
        if elf:
            z.writestr("x/_native.abi3.so", elf)
    return path


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
