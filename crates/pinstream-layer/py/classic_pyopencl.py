"""The classic pinned-memory recipe through PyOpenCL, as PyOpenCL scripts write it: buffers
made with mem_flags.ALLOC_HOST_PTR, mapped with enqueue_map_buffer, filled through the mapped
NumPy arrays, then (1) the mapped arrays as sources of enqueue_copy into a device buffer,
(2) unmapped, the buffers as copy sources, (3) a kernel reading them; and one buffer made
with ALLOC_HOST_PTR | COPY_HOST_PTR from a NumPy array. Every result is checked.

Prints "key: value" lines like classic_recipe.c: the results (checksum, mismatches, result)
must be the same with and without libpinstream_layer.so; timings and VRAM probes are for the
GPU script (scripts/gpu-layer.sh).

    python3 classic_pyopencl.py [--count K] [--size-mib N] [--platform SUBSTR] [--probe CMD]
"""

import argparse
import subprocess
import time

import numpy as np
import pyopencl as cl

KERNEL = """
__kernel void sum_words(__global const uint *src, ulong n, __global ulong *partial) {
  size_t gid = get_global_id(0), gsz = get_global_size(0);
  ulong s = 0;
  for (ulong i = gid; i < n; i += gsz) s += src[i];
  partial[gid] = s;
}
"""


def pattern(words, k):
    """Buffer k's words, the same pattern as classic_recipe.c."""
    i = np.arange(words, dtype=np.uint64)
    salt = (k * 0x9E3779B9 + 0x1234567) & 0xFFFFFFFF
    return (((i * 2654435761) & 0xFFFFFFFF) ^ salt).astype(np.uint32)


def probe(cmd, when):
    if cmd:
        out = subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout
        print(f"probe_{when}: {(out.splitlines() or ['(no output)'])[0]}", flush=True)


def pick(platform):
    devices = [
        d
        for p in cl.get_platforms()
        if platform is None or platform in p.name
        for d in p.get_devices()
    ]
    if not devices:
        raise SystemExit(f"classic_pyopencl: no OpenCL device (platform filter {platform!r})")
    gpus = [d for d in devices if d.type & cl.device_type.GPU]
    return (gpus or devices)[0]


def timed(queue, count, nbytes, step):
    t0 = time.perf_counter()
    for k in range(count):
        step(k)
    queue.finish()
    return nbytes * count / (time.perf_counter() - t0) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--size-mib", type=int, default=2)
    ap.add_argument("--platform")
    ap.add_argument("--probe")
    a = ap.parse_args()
    dev = pick(a.platform)
    print(f"device: {dev.name} ({dev.platform.name})")
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx)
    mf = cl.mem_flags
    nbytes = a.size_mib << 20
    words = nbytes // 4
    expected = [pattern(words, k) for k in range(a.count)]
    print(f"buffers: {a.count} x {a.size_mib} MiB READ_WRITE|ALLOC_HOST_PTR (PyOpenCL {cl.VERSION_TEXT})")

    probe(a.probe, "start")
    t0 = time.perf_counter()
    pinned, mapped = [], []
    for k in range(a.count):
        buf = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, size=nbytes)
        arr, _ = cl.enqueue_map_buffer(q, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (words,), np.uint32)
        arr[:] = expected[k]
        pinned.append(buf)
        mapped.append(arr)
    print(f"create_map_fill_s: {time.perf_counter() - t0:.3f}")
    probe(a.probe, "mapped")

    devbuf = cl.Buffer(ctx, mf.READ_WRITE, size=nbytes)
    back = np.empty(words, dtype=np.uint32)
    bad = 0

    def check(k):
        cl.enqueue_copy(q, back, devbuf)
        return int(np.count_nonzero(back != expected[k]))

    print(f"write_gbps: {timed(q, a.count, nbytes, lambda k: cl.enqueue_copy(q, devbuf, mapped[k], is_blocking=False)):.2f}")
    for k in range(a.count):
        cl.enqueue_copy(q, devbuf, mapped[k])
        bad += check(k)
    for arr in mapped:
        arr.base.release(q)
    q.finish()

    print(f"copy_gbps: {timed(q, a.count, nbytes, lambda k: cl.enqueue_copy(q, devbuf, pinned[k])):.2f}")
    for k in range(a.count):
        cl.enqueue_copy(q, devbuf, pinned[k])
        bad += check(k)

    prog = cl.Program(ctx, KERNEL).build()
    kern = prog.sum_words
    n_items = 131072 if dev.type & cl.device_type.GPU else 64
    partial = cl.Buffer(ctx, mf.READ_WRITE, size=n_items * 8)
    sums = np.empty(n_items, dtype=np.uint64)
    checksum = 0
    t0 = time.perf_counter()
    for k in range(a.count):
        kern(q, (n_items,), None, pinned[k], np.uint64(words), partial)
        cl.enqueue_copy(q, sums, partial)
        got = int(sums.sum(dtype=np.uint64))
        want = int(expected[k].sum(dtype=np.uint64))
        bad += got != want
        checksum = (checksum + got) % (1 << 64)
    print(f"kernel_gbps: {nbytes * a.count / (time.perf_counter() - t0) / 1e9:.2f}")

    # ALLOC_HOST_PTR | COPY_HOST_PTR from a NumPy array: the data must arrive.
    copied = cl.Buffer(ctx, mf.READ_ONLY | mf.ALLOC_HOST_PTR | mf.COPY_HOST_PTR, hostbuf=expected[0])
    cl.enqueue_copy(q, back, copied)
    copy_host_bad = int(np.count_nonzero(back != expected[0]))
    bad += copy_host_bad
    print(f"copy_host_ptr_mismatches: {copy_host_bad}")

    print(f"checksum: 0x{checksum:016x}")
    print(f"mismatches: {bad}")
    print(f"result: {'FAILED' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
