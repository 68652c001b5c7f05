"""gather/scatter and the GIL: a mapped array freed while its kernel waits behind a user event
never deadlocks and is not freed under the kernel; the calls let other threads run. The
freeing cases run in fresh processes, so that a deadlock fails the test instead of hanging it."""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pyopencl as cl
import pytest

import pinstream
from pinstream import _native

FREE_WHILE_QUEUED = textwrap.dedent("""
    import gc, sys, threading, time
    import numpy as np, pyopencl as cl, pinstream
    from pinstream import _native
    dev = [d for p in cl.get_platforms() for d in p.get_devices()][0]
    ctx = cl.Context([dev]); q = cl.CommandQueue(ctx)
    how, op = sys.argv[1], sys.argv[2]
    gate = cl.UserEvent(ctx)
    cl.enqueue_marker(q, wait_for=[gate])  # everything after it waits for the gate
    arr = pinstream.empty(ctx, 4096, np.uint8, mapped=True)
    arr[:] = np.arange(4096) % 251
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096)
    # Kept: PyOpenCL waits for the copy when its event is collected.
    fill = cl.enqueue_copy(q, buf, np.full(4096, 7, np.uint8), is_blocking=False)
    # The memory the kernels see, kept past the array's collection to read what landed.
    seen, _ = pinstream.device_buffer(arr)
    pieces = ([0, 1000], [100, 3000], [500, 1096])
    if op == "gather":
        evt = pinstream.gather(q, buf, arr, *pieces)
    else:
        evt = pinstream.scatter(q, arr, buf, pieces[2], pieces[1], pieces[0])
    opened = lambda: gate.set_status(cl.command_execution_status.COMPLETE)
    if how == "thread":  # another thread opens the gate: it needs the GIL to run
        threading.Timer(0.5, opened).start()
    del arr
    gc.collect()
    assert _native.census()[0] == 0, "the array is still in the table"
    assert _native.pending_frees() == 1, "freed at once, under its kernel still queued"
    if how == "same":  # the freeing thread itself opens the gate, after the free
        opened()
    evt.wait()
    until = time.monotonic() + 20
    while _native.pending_frees() and time.monotonic() < until:
        time.sleep(0.01)
    assert _native.pending_frees() == 0, "not freed after its kernel ran"
    out = np.empty(4096, np.uint8)
    if op == "gather":
        cl.enqueue_copy(q, out, buf)
        want = np.full(4096, 7, np.uint8)
        want[500:600] = np.arange(0, 100) % 251
        want[1096:4096] = np.arange(1000, 4000) % 251
        assert (out == want).all(), "the kernel read freed memory"
    else:
        cl.enqueue_copy(q, out, seen)
        want = (np.arange(4096) % 251).astype(np.uint8)
        want[0:100] = 7
        want[1000:4000] = 7
        assert (out == want).all(), "the scatter's bytes did not land"
    print("done")
""")


@pytest.mark.parametrize("op", ["gather", "scatter"])
@pytest.mark.parametrize("how", ["thread", "same"])
def test_freeing_a_mapped_array_while_its_kernel_waits_never_deadlocks(how, op):
    """`del` + `gc.collect()` of the mapped array of a gather (or scatter) whose kernel waits
    behind a user event returns at once: the memory is not freed then (it waits for
    pinstream's freeing thread) but once the kernel has run, by a thread that needs no GIL.
    The gate is opened by another thread (which needs the GIL the free once held) or by the
    freeing thread itself, after the free; either way the gather's kernel reads the array's
    bytes, and the scatter's lands in its memory."""
    try:
        out = subprocess.run([sys.executable, "-c", FREE_WHILE_QUEUED, how, op],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{op}: freeing the array while its kernel waited deadlocked ({how})")
    assert out.returncode == 0 and out.stdout.split() == ["done"], out.stderr


def timed_gather(ctx, queue, n):
    """A native gather of `n` one-byte pieces in reverse order (checked for overlaps, table
    written), with a thread stamping the time every millisecond meanwhile: the call's start
    and end, and the stamps."""
    src = pinstream.empty(ctx, n, np.uint8, mapped=True)
    dst = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n)
    at = np.arange(n, dtype=np.uint64)
    raw = np.stack([at, np.ones(n, np.uint64), at[::-1].copy()], axis=1).tobytes()
    stamps, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            stamps.append(time.monotonic())
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        time.sleep(0.02)
        start = time.monotonic()
        handle = _native.gather(queue.int_ptr, dst.int_ptr, src, raw, False)
        end = time.monotonic()
    finally:
        stop.set()
        ticker.join()
    cl.Event.from_int_ptr(handle, retain=False).wait()
    return start, end, stamps


def test_a_gather_lets_other_threads_run(ctx, queue):
    """The library's part of a call (checking many pieces and writing their table, the kernel
    enqueued) runs with the GIL released: another thread keeps running meanwhile. With the
    GIL held, no stamp falls in the first half of the call (the other thread runs only at its
    edges, where the interpreter hands the GIL over between bytecodes). Pieces are added until
    the call is long enough to tell, in a debug or a release build."""
    for n in (1 << 18, 1 << 20, 1 << 22):
        start, end, stamps = timed_gather(ctx, queue, n)
        if end - start >= 0.04:
            break
    else:
        pytest.fail(f"even {n} pieces took only {end - start:.4f} s: too short to tell")
    inside = [t for t in stamps if start + 0.005 < t < (start + end) / 2]
    assert inside, f"no other thread ran during the first half of the {end - start:.3f} s call"
