"""Streams a kernel in place over a pinned array that may be larger than VRAM, with one call.

The hand-written PyOpenCL loop (a ring of device buffers, non-blocking copies and kernels
chained by events, a VRAM budget) becomes ``pinstream.stream(queue, kernel, inout=a)``. The
kernel is the seed's, ``d[i] = d[i] * 2654435761 + 12345`` over uint32 (examples/seed.cl), so
a GPU script can compare this with the command line's ``run`` on the same work:

    python3 examples/python/stream_larger_than_vram.py --total 10GiB --budget 4GiB --block 64MiB --repeat 5
    pinstream run --kernel examples/seed.cl --entry seed --synthetic 10GiB --dtype u32 \\
        --vram-budget 4GiB --block 64MiB

The default size is small (64 MiB, for CI on a CPU device). The result is checked against
NumPy (``--no-check`` skips it); each repeat prints its GB/s (bytes both ways over the device
time, and over the call's wall clock), then the median and the last report. ``--json`` prints the reports as JSON lines.
Ctrl-C stops the run cleanly.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time

import numpy as np
import pyopencl as cl

import pinstream

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = os.path.join(HERE, os.pardir, "seed.cl")
UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30,
         "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40, "kb": 10**3, "mb": 10**6, "gb": 10**9}
CHUNK = 1 << 24  # elements filled or checked at a time: no temporary as large as the array


def size(text):
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 64MiB or 10GiB")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def residency(text):
    """``--residency``: 'auto', 'off' or a size, as ``pinstream.stream(residency=...)`` takes."""
    if text.lower() in ("auto", "off"):
        return text.lower()
    try:
        return size(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not auto, off or a size such as 2GiB") from None


def device():
    """The first GPU, else the first device (PYOPENCL_CTX picks another, as PyOpenCL does)."""
    if "PYOPENCL_CTX" in os.environ:
        return cl.create_some_context(interactive=False).devices[0]
    devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    gpus = [d for d in devices if d.type & cl.device_type.GPU]
    return (gpus or devices)[0]


MASK = 0xFFFFFFFF


def steps(times):
    """``times`` applications of the kernel, x -> a*x + b (mod 2**32), as one such map
    x -> A*x + B (A = a**times, B = b*(a**(times-1) + ... + 1)): worked out once, so the check
    costs one multiply-add per element however many passes ran (10 GiB after 25 passes: one
    pass over the array, not 25)."""
    big_a, big_b = 1, 0
    for _ in range(times):
        big_a, big_b = (2654435761 * big_a) & MASK, (2654435761 * big_b + 12345) & MASK
    return big_a, big_b


def seeded(start, count, map_):
    """What the map ``map_`` (from ``steps``) makes of elements start..start+count."""
    big_a, big_b = map_
    x = np.arange(start, start + count, dtype=np.uint64) & MASK
    return ((x * np.uint64(big_a) + np.uint64(big_b)) & MASK).astype(np.uint32)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--total", type=size, default=64 << 20, help="bytes to stream (default 64MiB)")
    p.add_argument("--block", type=size, help="bytes per block (default: as pinstream run picks)")
    p.add_argument("--budget", type=size, help="VRAM budget (default: half the free VRAM)")
    p.add_argument("--repeat", type=int, default=1, help="runs, timed each (default 1)")
    p.add_argument("--passes", type=int, default=1, help="passes per run (default 1)")
    p.add_argument("--residency", type=residency, default="auto",
                   help="auto (the default: blocks the budget leaves room for stay in VRAM across "
                        "passes), off (every pass streams every block, as the C example does), "
                        "or bytes")
    p.add_argument("--no-check", action="store_true", help="skip the check against NumPy")
    p.add_argument("--json", action="store_true", help="print each report as a JSON line")
    a = p.parse_args()

    dev = device()
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    kernel = cl.Kernel(cl.Program(ctx, open(KERNEL).read()).build(), "seed")
    n = a.total // 4
    print(f"device: {dev.name} ({dev.global_mem_size / 2**30:.1f} GiB); streaming "
          f"{n * 4 / 2**30:.2f} GiB of uint32 in place"
          + (" (larger than VRAM)" if n * 4 > dev.global_mem_size else ""))

    t = time.perf_counter()
    data = pinstream.empty(ctx, n, np.uint32)  # pinned, no VRAM
    print(f"pinned in {time.perf_counter() - t:.2f} s: {pinstream.info(data)}")
    for i in range(0, n, CHUNK):
        data[i:i + CHUNK] = np.arange(i, min(i + CHUNK, n), dtype=np.uint64).astype(np.uint32)

    reports = []
    for r in range(a.repeat):
        t = time.perf_counter()
        report = pinstream.stream(queue, kernel, inout=data, block=a.block, budget=a.budget,
                                  passes=a.passes, residency=a.residency)
        wall = time.perf_counter() - t
        reports.append(report)
        # Bytes both ways over the call's wall clock, as a C loop times itself.
        print(f"run {r + 1}: {report.gbps:.2f} GB/s, overlap {report.overlap:.2f}, "
              f"{report.device_wall_s:.3f} s; wall {2 * n * 4 * a.passes / wall / 1e9:.2f} GB/s")
        if a.json:
            print(json.dumps(report.as_dict()))
    print(f"median: {statistics.median(x.gbps for x in reports):.2f} GB/s over {a.repeat} run(s)")
    print(reports[-1])

    if not a.no_check:
        times = a.repeat * a.passes
        map_ = steps(times)
        for i in range(0, n, CHUNK):
            count = min(CHUNK, n - i)
            if not np.array_equal(data[i:i + count], seeded(i, count, map_)):
                print(f"MISMATCH in elements {i}..{i + count}", file=sys.stderr)
                return 1
        print(f"check: all {n} elements right after {times} application(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
