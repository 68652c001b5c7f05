"""The tables of scripts/gpu-layer.sh, from its output files: python3 gpu-layer-table.py OUT_DIR.

Every figure comes from the runs' own output (classic_recipe.c, classic_pyopencl.py, clpeak,
nvidia-smi); nothing is assumed. A run that did not produce a figure shows "-".
"""

import re
import sys
from pathlib import Path

KV = re.compile(r"^([A-Za-z_]\w*): (.*)$")
CLPEAK = re.compile(r"^\s*(enqueue\w+(?: non-blocking)?|memcpy (?:from|to) mapped ptr)\s*: ([\d.]+)")
GOAL_VRAM_MIB = 32
GOAL_RATIO = 0.99


def sections(path):
    """{run name: (key/values of its stdout, its stdout, its stderr)}"""
    out = {}
    if not path.exists():
        return out
    for chunk in path.read_text(errors="replace").split("=== ")[1:]:
        name, _, body = chunk.partition("\n")
        stdout, _, stderr = body.partition("--- stderr\n")
        kv = {}
        for line in stdout.splitlines():
            m = KV.match(line)
            if m:
                kv.setdefault(m.group(1), m.group(2).strip())
        out[name.strip()] = (kv, stdout, stderr)
    return out


def num(kv, key):
    try:
        return float(kv[key])
    except (KeyError, ValueError):
        return None


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def vram_delta(kv, before, after):
    a, b = num(kv, before), num(kv, after)
    return None if a is None or b is None else b - a


def mib(x):
    if x is None:
        return "-"
    return f"{x:+.0f} MiB" if abs(x) < 1024 else f"{x / 1024:+.2f} GiB"


def rewritten(stderr):
    return stderr.count("rewrote buffer #")


def recipe_table(title, runs, create_key):
    rows = [
        f"### {title}",
        "",
        "| run | rc | VRAM after create+map | create+map s | WriteBuffer from mapped GB/s | CopyBuffer GB/s | kernel read GB/s | buffers rewritten | checksum | mismatches | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (kv, _, err) in runs.items():
        rows.append(
            f"| {name} | {kv.get('rc', '-')} | {mib(vram_delta(kv, 'probe_start', 'probe_mapped'))} | {kv.get(create_key, '-')} | "
            f"{kv.get('write_gbps', '-')} | {kv.get('copy_gbps', '-')} | {kv.get('kernel_gbps', '-')} | {rewritten(err)} | "
            f"{kv.get('checksum', '-')} | {kv.get('mismatches', '-')} | {kv.get('result', '-')} |"
        )
    return rows + [""]


def clpeak_table(runs):
    names = ["enqueueWriteBuffer", "enqueueReadBuffer", "enqueueWriteBuffer non-blocking", "enqueueReadBuffer non-blocking", "memcpy to mapped ptr", "memcpy from mapped ptr"]
    rows = [
        "### clpeak 1.1.2 --transfer-bandwidth (Debian 12 package, unmodified)",
        "",
        "| run | rc | VRAM peak over before | " + " | ".join(names) + " | buffers rewritten |",
        "|---|---|---|" + "---|" * len(names) + "---|",
    ]
    for name, (kv, out, err) in runs.items():
        figures = {m.group(1): m.group(2) for m in map(CLPEAK.match, out.splitlines()) if m}
        rows.append(
            f"| {name} | {kv.get('rc', '-')} | {mib(vram_delta(kv, 'vram_before_mib', 'vram_peak_mib'))} | "
            + " | ".join(figures.get(n, "-") for n in names)
            + f" | {rewritten(err)} |"
        )
    return rows + [""]


def same_results(a, b):
    keys = ("checksum", "mismatches", "result", "words_checked")
    return all(a.get(k) == b.get(k) for k in keys) and a.get("result") == "ok"


def goals(classic, py):
    lines = ["### Goals (issue 17)", ""]
    none = classic.get("classic: no layer", ({}, "", ""))[0]
    lines.append(f"- VRAM of the classic recipe without the layer: {mib(vram_delta(none, 'probe_start', 'probe_mapped'))} (expected about +10 GiB for 10 x 1 GiB)")
    for way in ("LD_PRELOAD", "OPENCL_LAYERS"):
        kv = classic.get(f"classic: {way}", ({}, "", ""))[0]
        d = vram_delta(kv, "probe_start", "probe_mapped")
        ok = d is not None and d <= GOAL_VRAM_MIB
        lines.append(f"- VRAM with the layer through {way}: {mib(d)} (goal <= {GOAL_VRAM_MIB} MiB): {'PASS' if ok else 'FAIL'}")
        w0, w1 = num(none, "write_gbps"), num(kv, "write_gbps")
        ratio = w1 / w0 if w0 and w1 else None
        ok = ratio is not None and ratio >= GOAL_RATIO
        lines.append(f"- WriteBuffer bandwidth {way} / no layer: {fmt(ratio, '.3f')} (goal >= {GOAL_RATIO}): {'PASS' if ok else 'FAIL'}")
        lines.append(f"- results {way} identical to no layer: {'PASS' if same_results(none, kv) else 'FAIL'}")
    cp0 = classic.get("classic --copy-host-ptr: no layer", ({}, "", ""))
    cp1 = classic.get("classic --copy-host-ptr: LD_PRELOAD", ({}, "", ""))
    n = rewritten(cp1[2])
    kept = re.search(r"(\d+) with COPY_HOST_PTR \(", cp1[2])
    ok = n == 0 and same_results(cp0[0], cp1[0])
    lines.append(
        f"- COPY_HOST_PTR under LD_PRELOAD (never rewritten): {n} rewritten (goal 0), "
        f"{kept.group(1) if kept else 'no'} kept with the reason in the summary; results identical: {'PASS' if ok else 'FAIL'}"
    )
    pnone = py.get("pyopencl: no layer", ({}, "", ""))[0]
    for way in ("OPENCL_LAYERS", "LD_PRELOAD"):
        kv = py.get(f"pyopencl: {way}", ({}, "", ""))[0]
        if kv:
            lines.append(f"- PyOpenCL through {way}: VRAM {mib(vram_delta(kv, 'probe_start', 'probe_mapped'))} (no layer {mib(vram_delta(pnone, 'probe_start', 'probe_mapped'))}); results identical: {'PASS' if same_results(pnone, kv) else 'FAIL'}")
    return lines + [""]


def main():
    out = Path(sys.argv[1])
    classic = sections(out / "classic.txt")
    clpeak = sections(out / "clpeak.txt")
    py = sections(out / "pyopencl.txt")
    rows = ["## libpinstream_layer.so on this machine", ""]
    rows += recipe_table("classic_recipe.c: ALLOC_HOST_PTR buffers, mapped and filled", classic, "create_map_s")
    if clpeak:
        rows += clpeak_table(clpeak)
    if py:
        rows += recipe_table("classic_pyopencl.py: PyOpenCL mem_flags.ALLOC_HOST_PTR, 4 buffers", py, "create_map_fill_s")
    rows += goals(classic, py)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
