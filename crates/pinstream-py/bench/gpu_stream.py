#!/usr/bin/env python3
"""Issue 15's benchmark: stream 10 GiB in and 10 GiB out through a 4 GiB device budget, from
Python, three ways, on one GPU, in one process:

  pageable   NumPy arrays (np.empty), copied by PyOpenCL         (what PyOpenCL users have)
  pinstream  pinstream.empty arrays, copied by PyOpenCL          (this package)
  torch      torch.empty(..., pin_memory=True), driven by torch  (what PyTorch users have)

Each way runs the same ring: 16 device slots of 256 MiB (the 4 GiB budget); block i goes up
into slot i % 16 (after that slot's previous download), a kernel computes x*2+1 in place, and
the block comes back into the output array; uploads, kernels and downloads run on three
queues/streams joined by events. Throughput is bytes each way / wall time. Pin time is the
time to make one 10 GiB array (after a small warm-up allocation, so that driver start-up is
not counted for either). The output is checked (block i holds i, comes back as 2i+1).

Also measured: how long a non-blocking 256 MiB copy call takes to return against the copy's
completion (does `enqueue_copy(..., is_blocking=False)` block?), and single copies that cross
the registration chunks of a pinstream array.

Writes OUT/python-bench.json (every figure) and OUT/python-bench.txt (the table). Exits 1 when
a run fails or the data are wrong; the goals are reported, not enforced.
  python3 gpu_stream.py --out DIR [--size-gib 10] [--budget-gib 4] [--block-mib 256]
                        [--repeat 5] [--ways pageable,pinstream,torch] [--any-device]
"""

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

MiB = 1 << 20
GiB = 1 << 30

KERNEL = """
__kernel void scale(__global float *x, const ulong n) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * 2.0f + 1.0f;
}
"""


def now():
    return time.perf_counter()


def log(*args):
    print(f"[{time.strftime('%H:%M:%S')}]", *args, flush=True)


# ---- data: block i holds i, comes back as 2i + 1 -------------------------------------------

def fill(a, block):
    for i, lo in enumerate(range(0, a.size, block)):
        a[lo:lo + block] = i


def check(out, block):
    """Every block's first, middle and last element, and two blocks whole."""
    n_blocks = -(-out.size // block)
    bad = 0
    for i, lo in enumerate(range(0, out.size, block)):
        b = out[lo:lo + block]
        want = np.float32(2 * i + 1)
        if b[0] != want or b[len(b) // 2] != want or b[-1] != want:
            bad += 1
        elif i in (0, n_blocks - 1) and not (b == want).all():
            bad += 1
    return bad


# ---- OpenCL (PyOpenCL): pageable NumPy and pinstream arrays --------------------------------

def opencl_context(any_device):
    import pyopencl as cl
    for p in cl.get_platforms():
        if "NVIDIA" in p.name:
            gpus = p.get_devices(cl.device_type.GPU)
            if gpus:
                return cl.Context([gpus[0]])
    if any_device:
        dev = [d for p in cl.get_platforms() for d in p.get_devices()][0]
        return cl.Context([dev])
    sys.exit("no NVIDIA OpenCL platform (is /etc/OpenCL/vendors/nvidia.icd there? "
             "scripts/gpu-common.sh register_nvidia_icd writes it)")


class ClRing:
    def __init__(self, ctx, block, slots):
        import pyopencl as cl
        self.cl, self.ctx, self.block = cl, ctx, block
        self.queues = [cl.CommandQueue(ctx) for _ in range(3)]
        self.slots = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, block * 4) for _ in range(slots)]
        self.kernel = cl.Program(ctx, KERNEL).build().scale

    def run(self, src, dst):
        cl, (q_up, q_k, q_down) = self.cl, self.queues
        freed = [None] * len(self.slots)
        t0 = now()
        for i, lo in enumerate(range(0, src.size, self.block)):
            s, hi = i % len(self.slots), min(src.size, lo + self.block)
            wait = [freed[s]] if freed[s] is not None else None
            up = cl.enqueue_copy(q_up, self.slots[s], src[lo:hi], is_blocking=False,
                                 wait_for=wait)
            q_up.flush()
            k = self.kernel(q_k, (hi - lo,), None, self.slots[s], np.uint64(hi - lo),
                            wait_for=[up])
            q_k.flush()
            freed[s] = cl.enqueue_copy(q_down, dst[lo:hi], self.slots[s], is_blocking=False,
                                       wait_for=[k])
            q_down.flush()
        for q in self.queues:
            q.finish()
        return now() - t0

    def single_copies(self, host, offsets, nbytes):
        """H2D then D2H of `nbytes` at each byte offset of `host` (1-D float32): GB/s each."""
        cl, q = self.cl, self.queues[0]
        buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, nbytes)
        out = []
        for off in offsets:
            part = host[off // 4:(off + nbytes) // 4]
            cl.enqueue_copy(q, buf, part).wait()  # warm
            t0 = now()
            cl.enqueue_copy(q, buf, part, is_blocking=False).wait()
            h2d = nbytes / (now() - t0) / 1e9
            t0 = now()
            cl.enqueue_copy(q, part, buf, is_blocking=False).wait()
            d2h = nbytes / (now() - t0) / 1e9
            out.append({"offset": off, "bytes": nbytes, "h2d_gbps": h2d, "d2h_gbps": d2h})
        return out

    def call_vs_done(self, host, nbytes, times=4):
        """How long a non-blocking upload call takes to return, against its completion."""
        cl, q = self.cl, self.queues[0]
        buf = self.slots[0]
        part = host[: nbytes // 4]
        calls, dones = [], []
        for _ in range(times):
            q.finish()
            t0 = now()
            evt = cl.enqueue_copy(q, buf, part, is_blocking=False)
            calls.append(now() - t0)
            evt.wait()
            dones.append(now() - t0)
        return {"bytes": nbytes, "call_s": statistics.median(calls),
                "done_s": statistics.median(dones)}


# ---- torch ---------------------------------------------------------------------------------

class TorchRing:
    def __init__(self, block, slots):
        import torch
        self.torch, self.block = torch, block
        self.slots = [torch.empty(block, dtype=torch.float32, device="cuda") for _ in range(slots)]
        self.streams = [torch.cuda.Stream() for _ in range(3)]

    def run(self, src, dst):
        torch, (s_up, s_k, s_down) = self.torch, self.streams
        freed = [None] * len(self.slots)
        torch.cuda.synchronize()
        t0 = now()
        for i, lo in enumerate(range(0, src.numel(), self.block)):
            s, hi = i % len(self.slots), min(src.numel(), lo + self.block)
            slot = self.slots[s][: hi - lo]
            with torch.cuda.stream(s_up):
                if freed[s] is not None:
                    s_up.wait_event(freed[s])
                slot.copy_(src[lo:hi], non_blocking=True)
                up = torch.cuda.Event()
                up.record(s_up)
            with torch.cuda.stream(s_k):
                s_k.wait_event(up)
                slot.mul_(2).add_(1)
                k = torch.cuda.Event()
                k.record(s_k)
            with torch.cuda.stream(s_down):
                s_down.wait_event(k)
                dst[lo:hi].copy_(slot, non_blocking=True)
                freed[s] = torch.cuda.Event()
                freed[s].record(s_down)
        torch.cuda.synchronize()
        return now() - t0

    def call_vs_done(self, host, nbytes, times=4):
        torch = self.torch
        part, slot = host[: nbytes // 4], self.slots[0][: nbytes // 4]
        calls, dones = [], []
        for _ in range(times):
            torch.cuda.synchronize()
            t0 = now()
            slot.copy_(part, non_blocking=True)
            calls.append(now() - t0)
            torch.cuda.synchronize()
            dones.append(now() - t0)
        return {"bytes": nbytes, "call_s": statistics.median(calls),
                "done_s": statistics.median(dones)}


# ---- the three ways ------------------------------------------------------------------------

def stream_runs(ring, src, dst, repeat, block, size):
    times = [ring.run(src, dst) for _ in range(repeat)]
    bad = check(dst if isinstance(dst, np.ndarray) else dst.numpy(), block)
    gbps = [size / t / 1e9 for t in times]
    return {"seconds": times, "gbps_each_way": gbps, "median_gbps_each_way":
            statistics.median(gbps), "bad_blocks": bad}


def way_pageable(ctx, a):
    ring = ClRing(ctx, a.block, a.slots)
    t0 = now()
    src, dst = np.empty(a.elems, np.float32), np.empty(a.elems, np.float32)
    fill(src, a.block)
    dst.fill(0)  # resident, as pinned memory is: page faults are not what is measured
    r = {"alloc_and_touch_s": now() - t0}
    r["call_vs_done"] = ring.call_vs_done(src, a.block * 4)
    r.update(stream_runs(ring, src, dst, a.repeat, a.block, a.size))
    return r


def way_pinstream(ctx, a):
    import pinstream
    ring = ClRing(ctx, a.block, a.slots)
    t0 = now()
    warm = pinstream.empty(ctx, MiB // 4, np.float32)
    r = {"warmup_pin_1mib_s": now() - t0}
    del warm
    t0 = now()
    src = pinstream.empty(ctx, a.elems, np.float32)
    r["pin_s"] = now() - t0
    t0 = now()
    dst = pinstream.empty(ctx, a.elems, np.float32)
    r["pin_s_second"] = now() - t0
    i = pinstream.info(src)
    r["info"] = {k: getattr(i, k) for k in ("strategy", "pinned", "pin_state", "basis",
                                             "vram_cost", "vram_note", "nbytes", "pin_time")}
    r["info"]["chunks"] = len(i.chunks)
    fill(src, a.block)
    r["call_vs_done"] = ring.call_vs_done(src, a.block * 4)
    chunk = i.chunks[0][1] - i.chunks[0][0]
    # Within one registration chunk, across one boundary, and across several.
    r["single_copies"] = (ring.single_copies(src, [0, chunk // 2], min(chunk, a.size // 2))
                          + ring.single_copies(src, [0], min(8 * chunk, a.size // 2)))
    r.update(stream_runs(ring, src, dst, a.repeat, a.block, a.size))
    return r


def way_torch(a):
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    t0 = now()
    torch.cuda.init()
    torch.empty(MiB // 4, dtype=torch.float32, pin_memory=True)
    r = {"warmup_cuda_init_and_pin_1mib_s": now() - t0}
    t0 = now()
    src = torch.empty(a.elems, dtype=torch.float32, pin_memory=True)
    r["pin_s"] = now() - t0
    t0 = now()
    dst = torch.empty(a.elems, dtype=torch.float32, pin_memory=True)
    r["pin_s_second"] = now() - t0
    fill(src.numpy(), a.block)
    ring = TorchRing(a.block, a.slots)
    r["call_vs_done"] = ring.call_vs_done(src, a.block * 4)
    r.update(stream_runs(ring, src, dst, a.repeat, a.block, a.size))
    r["torch"] = torch.__version__
    return r


# ---- report --------------------------------------------------------------------------------

def goals(res):
    g = {}
    p, t, n = (res.get(k, {}) for k in ("pinstream", "torch", "pageable"))
    if "median_gbps_each_way" in p and "median_gbps_each_way" in t:
        ratio = p["median_gbps_each_way"] / t["median_gbps_each_way"]
        g["pinstream_vs_torch_streaming"] = {"ratio": ratio, "goal": ">= 0.97", "met": ratio >= 0.97}
    if "median_gbps_each_way" in p and "median_gbps_each_way" in n:
        ratio = p["median_gbps_each_way"] / n["median_gbps_each_way"]
        g["pinstream_vs_pageable_streaming"] = {"ratio": ratio, "goal": ">= 5", "met": ratio >= 5}
    if "pin_s" in p and "pin_s" in t:
        ratio = p["pin_s"] / t["pin_s"]
        g["pin_time_pinstream_over_torch"] = {"ratio": ratio, "goal": "<= 0.1", "met": ratio <= 0.1}
    return g


def table(res, a):
    rows = [f"{a.size / GiB:g} GiB in and {a.size / GiB:g} GiB out through {a.slots} x "
            f"{a.block * 4 / MiB:g} MiB device slots ({a.slots * a.block * 4 / GiB:g} GiB), "
            f"{a.repeat} runs each; GB/s each way (median, min-max)", "",
            f"| host memory | pin {a.size / GiB:g} GiB (s) | GB/s each way | min-max | "
            f"non-blocking {a.block * 4 / MiB:g} MiB upload: call returns / copy done (ms) "
            "| wrong blocks |",
            "|---|---|---|---|---|---|"]
    names = {"pageable": "NumPy np.empty (pageable) + PyOpenCL",
             "pinstream": "pinstream.empty + PyOpenCL",
             "torch": "torch.empty(pin_memory=True) + torch"}
    for k, name in names.items():
        r = res.get(k)
        if r is None:
            continue
        if "error" in r:
            rows.append(f"| {name} | failed: {r['error']} | | | | |")
            continue
        pin = f"{r['pin_s']:.2f}" if "pin_s" in r else f"- (alloc+touch {r['alloc_and_touch_s']:.2f})"
        g = r["gbps_each_way"]
        c = r["call_vs_done"]
        rows.append(f"| {name} | {pin} | {r['median_gbps_each_way']:.1f} | {min(g):.1f}-{max(g):.1f}"
                    f" | {c['call_s'] * 1e3:.2f} / {c['done_s'] * 1e3:.2f} | {r['bad_blocks']} |")
    rows.append("")
    for k, g in res["goals"].items():
        rows.append(f"- {k}: {g['ratio']:.3f} (goal {g['goal']}): {'met' if g['met'] else 'NOT met'}")
    p = res.get("pinstream", {})
    if "info" in p:
        i = p["info"]
        rows.append(f"- pinstream array: strategy {i['strategy']}, {i['pin_state']}, {i['chunks']} "
                    f"chunks, VRAM cost {i['vram_cost']} bytes ({i['vram_note']})")
    for c in p.get("single_copies", []):
        rows.append(f"- pinstream single copy of {c['bytes'] / MiB:g} MiB at offset "
                    f"{c['offset'] / MiB:g} MiB: H2D {c['h2d_gbps']:.1f}, D2H {c['d2h_gbps']:.1f} GB/s")
    return "\n".join(rows) + "\n"


def environment():
    env = {"python": sys.version.split()[0], "numpy": np.__version__,
           "machine": platform.machine(), "OPENCL_DYLIB_PATH": os.environ.get("OPENCL_DYLIB_PATH")}
    try:
        import pyopencl as cl
        env["pyopencl"] = cl.VERSION_TEXT
        env["platforms"] = [p.name + " / " + p.version for p in cl.get_platforms()]
    except Exception as e:  # noqa: BLE001 - recorded, not fatal here
        env["pyopencl"] = f"missing: {e}"
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--size-gib", type=float, default=10)
    ap.add_argument("--budget-gib", type=float, default=4)
    ap.add_argument("--block-mib", type=float, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ways", default="pageable,pinstream,torch")
    ap.add_argument("--any-device", action="store_true",
                    help="use the first OpenCL device when there is no NVIDIA GPU (a dry run)")
    a = ap.parse_args()
    a.block = int(a.block_mib * MiB) // 4
    a.elems = int(a.size_gib * GiB) // 4 // a.block * a.block
    a.size = a.elems * 4
    a.slots = max(1, int(a.budget_gib * GiB) // (a.block * 4))
    os.makedirs(a.out, exist_ok=True)

    res = {"config": {"size_bytes": a.size, "block_bytes": a.block * 4, "slots": a.slots,
                      "repeat": a.repeat}, "environment": environment()}
    log("environment", json.dumps(res["environment"]))
    ways = a.ways.split(",")
    ctx = opencl_context(a.any_device) if {"pageable", "pinstream"} & set(ways) else None
    if ctx is not None:
        res["environment"]["opencl_device"] = ctx.devices[0].name
    for way in ways:
        log("running", way)
        try:
            res[way] = way_torch(a) if way == "torch" else globals()[f"way_{way}"](ctx, a)
        except Exception as e:  # noqa: BLE001 - one way failing must not lose the others
            res[way] = {"error": f"{type(e).__name__}: {e}"}
        log(way, json.dumps({k: v for k, v in res[way].items() if k != "info"}))
        gc.collect()
    res["environment"]["OPENCL_DYLIB_PATH_at_end"] = os.environ.get("OPENCL_DYLIB_PATH")
    res["environment"]["loaders"] = sorted(
        {line.split()[-1] for line in open("/proc/self/maps") if "libOpenCL" in line})
    res["goals"] = goals(res)
    text = table(res, a)
    with open(os.path.join(a.out, "python-bench.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(a.out, "python-bench.txt"), "w") as f:
        f.write(text)
    print(text)
    failed = [w for w in ways if "error" in res[w] or res[w].get("bad_blocks")]
    if failed:
        log("FAILED:", ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
