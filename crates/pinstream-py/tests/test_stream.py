"""pinstream.stream: the engine over pinned arrays with the caller's PyOpenCL kernel. Results
are checked exactly against NumPy; the Ctrl-C cases run in fresh processes that get a real
SIGINT, so that a deadlock fails the test instead of hanging it."""

import signal
import subprocess
import sys
import textwrap
import types

import numpy as np
import pyopencl as cl
import pytest

import pinstream
from conftest import assert_speaks_python

SEED = """
__kernel void seed(__global uint* d, ulong n) {
    size_t i = get_global_id(0);
    if (i < n) d[i] = d[i] * 2654435761u + 12345u;
}"""

KERNELS = SEED + """
__kernel void affine(__global const float* x, __global float* y, ulong n, float a, float b) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + b;
}
__kernel void add(__global const int* a, __global const int* b, __global int* c, uint n) {
    size_t i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
__kernel void sum4(__global const uint* x, __global uint* y, ulong n) {
    size_t i = get_global_id(0);
    if (i < n / 4) y[i] = x[4 * i] + x[4 * i + 1] + x[4 * i + 2] + x[4 * i + 3];
}
__kernel void lookup(__global uint* x, __global const uint* shift, __global const uint* table,
                     ulong n, ulong block, ulong offset) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] + table[(offset + i) % 16] + shift[0];
}
__kernel void slow(__global uint* d, ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    uint x = d[i];
    for (int k = 0; k < 500; k++) x = x * 2654435761u + 12345u;
    d[i] = x;
}
__kernel void two_buffers(__global uint* a, __global uint* b, ulong n) { }
__kernel void floats(__global float* x, ulong n) { }
"""

MIB = 1 << 20


@pytest.fixture(scope="module")
def program(ctx):
    """The kernels, each retrieved once (PyOpenCL warns when one is retrieved again)."""
    prg = cl.Program(ctx, KERNELS).build()
    return types.SimpleNamespace(**{k.function_name: k for k in prg.all_kernels()})


def seeded(x, times=1):
    x = x.astype(np.uint64)
    for _ in range(times):
        x = (x * 2654435761 + 12345) & 0xFFFFFFFF
    return x.astype(np.uint32)


def pinned(ctx, values):
    a = pinstream.empty(ctx, values.shape, values.dtype)
    a[:] = values
    return a


def test_in_place(ctx, queue, program):
    start = np.arange(1 << 20, dtype=np.uint32)
    a = pinned(ctx, start)
    r = pinstream.stream(queue, program.seed, inout=a, block=256 << 10, budget=2 * MIB)
    assert np.array_equal(a, seeded(start))
    assert r.blocks == 16 and r.passes == 1 and r.bytes == 2 * a.nbytes
    assert r.bytes_up == r.bytes_down == a.nbytes
    assert r.gbps > 0 and 0 < r.overlap <= 1.0 + 1e-9
    assert r.as_dict()["blocks"] == 16
    assert "GB/s" in repr(r) and "16 block(s)" in repr(r)


def test_input_to_output_with_scalars(ctx, queue, program):
    x = pinned(ctx, (np.arange(300_001) % 1000).astype(np.float32))  # exact, fused or not
    y = pinstream.zeros(ctx, x.shape, np.float32)
    pinstream.stream(queue, program.affine, input=x, output=y, args={"a": 3.0, "b": -0.5},
                     block=64 << 10, budget=MIB)
    assert np.array_equal(y, np.float32(3.0) * x + np.float32(-0.5))


def test_several_inputs_and_a_registered_output(ctx, queue, program):
    a = pinned(ctx, np.arange(100_000, dtype=np.int32))
    b = pinned(ctx, np.full(100_000, -7, dtype=np.int32))
    c = pinstream.register(ctx, np.zeros(100_000, dtype=np.int32))
    try:
        pinstream.stream(queue, program.add, input=[a, b], output=c, block=16 << 10, budget=MIB)
        assert np.array_equal(c, np.arange(100_000, dtype=np.int32) - 7)
    finally:
        pinstream.unregister(c)


def test_k_inputs_per_output(ctx, queue, program):
    x = pinned(ctx, np.arange(1 << 18, dtype=np.uint32))
    y = pinstream.zeros(ctx, x.size // 4, np.uint32)
    pinstream.stream(queue, program.sum4, input=x, output=y, reduce=4, block=64 << 10,
                     budget=MIB)
    assert np.array_equal(y, x.reshape(-1, 4).sum(axis=1, dtype=np.uint32))


def test_resident_arguments_bind_by_name(ctx, queue, program):
    start = np.arange(1 << 16, dtype=np.uint32)
    x = pinned(ctx, start)
    table = pinned(ctx, np.arange(16, dtype=np.uint32) * 1000)
    shift = pinned(ctx, np.array([5], dtype=np.uint32))
    # Given in the other order than the kernel's: bound by name.
    r = pinstream.stream(queue, program.lookup, inout=x, resident={"table": table, "shift": shift},
                         block=16 << 10, budget=MIB)
    assert np.array_equal(x, start + (np.arange(start.size) % 16) * 1000 + 5)
    assert r.resident_bytes == table.nbytes + shift.nbytes
    with pytest.raises(ValueError, match="no buffer argument `tabel`"):
        pinstream.stream(queue, program.lookup, inout=x, resident={"tabel": table, "shift": shift})


@pytest.mark.parametrize("passes", [1, 2, 5])
@pytest.mark.parametrize("residency", ["auto", "off"])
def test_passes_read_what_the_pass_before_wrote(ctx, queue, program, passes, residency):
    start = np.arange(1 << 18, dtype=np.uint32) * 7
    a = pinned(ctx, start)
    r = pinstream.stream(queue, program.seed, inout=a, block=64 << 10, budget=MIB,
                         passes=passes, residency=residency)
    assert np.array_equal(a, seeded(start, passes))
    assert r.passes == passes
    if residency == "off" or passes == 1:
        assert r.resident_blocks == 0
    else:
        assert r.resident_blocks > 0, r.residency
        assert r.bytes_up < passes * a.nbytes  # resident blocks are uploaded once


def test_residency_0_is_off_and_none_is_auto_as_in_c(ctx, queue, program):
    start = np.arange(1 << 18, dtype=np.uint32) * 7
    reports = {}
    for residency in ("off", 0, np.uint64(0), "auto", None):
        a = pinned(ctx, start)
        reports[repr(residency)] = pinstream.stream(queue, program.seed, inout=a, block=64 << 10,
                                                    budget=MIB, passes=3, residency=residency)
        assert np.array_equal(a, seeded(start, 3))
    off, auto = reports["'off'"], reports["'auto'"]
    assert off.resident_blocks == 0 and auto.resident_blocks > 0
    for same, like in (("0", off), (repr(np.uint64(0)), off), ("None", auto)):
        got = reports[same]
        assert (got.resident_blocks, got.residency) == (like.resident_blocks, like.residency), same
    a = pinned(ctx, start)
    for bad, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError), ([], TypeError)):
        with pytest.raises(error, match="'auto' \\(or None\\), 'off' \\(or 0\\)"):
            pinstream.stream(queue, program.seed, inout=a, passes=2, residency=bad)


def test_unpinned_arrays_are_refused_with_the_fix(ctx, queue, program):
    plain = np.zeros(4096, dtype=np.uint32)
    with pytest.raises(pinstream.NotRegisteredError) as e:
        pinstream.stream(queue, program.seed, inout=plain)
    assert_speaks_python(str(e.value), "pinstream.register(ctx, array)")
    assert "pinstream.empty" in str(e.value) and "inout" in str(e.value)


def test_bad_calls_name_the_fix(ctx, queue, program):
    a = pinned(ctx, np.zeros(4096, dtype=np.uint32))
    with pytest.raises(ValueError, match="inout=ARRAY"):
        pinstream.stream(queue, program.seed)
    with pytest.raises(ValueError, match="not both"):
        pinstream.stream(queue, program.seed, inout=a, output=a)
    with pytest.raises(TypeError, match="pyopencl.Kernel"):
        pinstream.stream(queue, "seed", inout=a)
    with pytest.raises(ValueError, match="share memory"):
        pinstream.stream(queue, program.sum4, input=a, output=a[:1024], reduce=4)
    with pytest.raises(ValueError, match="args=\\{'b': VALUE\\}"):
        pinstream.stream(queue, program.affine, input=pinned(ctx, np.zeros(64, np.float32)),
                         output=pinstream.empty(ctx, 64, np.float32), args={"a": 1})
    with pytest.raises(ValueError, match="raise budget= to at least"):
        pinstream.stream(queue, program.seed, inout=a, block=4096, budget=4096)


def test_wrong_kernel_signatures_are_refused(ctx, queue, program):
    a = pinned(ctx, np.zeros(4096, dtype=np.uint32))
    with pytest.raises(ValueError, match="2 buffer argument") as e:
        pinstream.stream(queue, program.two_buffers, inout=a)
    assert "pinstream.stream binds" in str(e.value)
    with pytest.raises(ValueError, match="numpy.float32 or declare it uint\\*"):
        pinstream.stream(queue, program.floats, inout=a)


def test_progress_is_called_on_this_thread(ctx, queue, program):
    import threading

    a = pinned(ctx, np.zeros(1 << 18, dtype=np.uint32))
    calls = []
    here = threading.get_ident()
    r = pinstream.stream(queue, program.seed, inout=a, block=16 << 10, budget=MIB,
                         progress=lambda b, n: calls.append((b, n, threading.get_ident())))
    assert calls and all(t == here for _, _, t in calls)
    assert calls[-1][:2] == (r.blocks, a.nbytes)
    assert all(x[0] < y[0] for x, y in zip(calls, calls[1:]))


def test_an_exception_in_progress_stops_the_run(ctx, queue, program):
    start = np.arange(1 << 20, dtype=np.uint32)
    a = pinned(ctx, start)
    seen = []

    def stop_at_two(blocks, nbytes):
        seen.append(blocks)
        if len(seen) == 2:
            raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough"):  # slow: 64 blocks never come at once
        pinstream.stream(queue, program.slow, inout=a, block=16 << 10, budget=MIB,
                         progress=stop_at_two)
    assert len(seen) == 2 and seen[-1] < 64, "progress was called after it raised"
    # The context, the kernel and the array are usable: a full run again.
    a[:] = start
    pinstream.stream(queue, program.seed, inout=a, block=16 << 10, budget=MIB)
    assert np.array_equal(a, seeded(start))


def test_other_threads_run_while_it_streams(ctx, queue, program):
    import threading
    import time

    a = pinned(ctx, np.ones(1 << 20, dtype=np.uint32))
    ticks, running = [], threading.Event()

    def count():
        running.set()
        while running.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    running.wait()
    try:
        # As many passes as make the run long enough to tell (one is ~4 ms on an H100).
        passes = 1
        while True:
            del ticks[:]
            r = pinstream.stream(queue, program.slow, inout=a, block=64 << 10, budget=MIB,
                                 passes=passes)
            if r.wall_s > 0.05 or passes >= 1 << 12:
                break
            passes *= 4
    finally:
        running.clear()
        t.join()
    assert r.wall_s > 0.05, "too fast to tell"
    # The thread ran all along (the GIL is released while the run goes on), not only at
    # the end: it ticked at least every 50 ms on average.
    assert len(ticks) > r.wall_s / 0.05, (len(ticks), r.wall_s)


CTRL_C = textwrap.dedent("""
    import sys, time
    import numpy as np, pyopencl as cl, pinstream
    dev = [d for p in cl.get_platforms() for d in p.get_devices()][0]
    ctx = cl.Context([dev]); q = cl.CommandQueue(ctx)
    src = '''__kernel void slow(__global uint* d, ulong n) {
        size_t i = get_global_id(0); if (i >= n) return;
        uint x = d[i]; for (int k = 0; k < 2000; k++) x = x * 2654435761u + 12345u; d[i] = x; }'''
    slow = cl.Program(ctx, src).build().slow
    a = pinstream.empty(ctx, 1 << 22, np.uint32); a[:] = 1
    said = []
    def started(blocks, nbytes):
        if not said:
            said.append(blocks)
            print("started", flush=True)
    t = time.monotonic()
    try:
        pinstream.stream(q, slow, inout=a, block=16 << 10, budget=1 << 20, progress=started)
        print("not interrupted"); sys.exit(1)
    except KeyboardInterrupt:
        print(f"interrupted in {time.monotonic() - t:.2f} s", flush=True)
    from pinstream import _native
    assert _native.census() == (1, a.nbytes, 0), _native.census()  # the array alone
    # The context is usable: a full run again, checked.
    b = pinstream.empty(ctx, 1 << 16, np.uint32); b[:] = np.arange(1 << 16, dtype=np.uint32)
    seed = cl.Program(ctx, '''__kernel void seed(__global uint* d, ulong n) {
        size_t i = get_global_id(0); if (i < n) d[i] = d[i] * 2654435761u + 12345u; }''').build().seed
    pinstream.stream(q, seed, inout=b, block=16 << 10, budget=1 << 20)
    want = ((np.arange(1 << 16, dtype=np.uint64) * 2654435761 + 12345) & 0xFFFFFFFF).astype(np.uint32)
    assert np.array_equal(b, want), "wrong result after the interrupted run"
    print("ok", flush=True)
""")


def test_ctrl_c_stops_cleanly_and_the_context_runs_again():
    p = subprocess.Popen([sys.executable, "-c", CTRL_C], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.strip() == "started", (line, p.stderr.read())
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (out, err)
    assert "interrupted in" in out and out.strip().endswith("ok"), (out, err)


SECOND_DEVICE = textwrap.dedent("""
    import numpy as np, pyopencl as cl, pinstream
    platform = cl.get_platforms()[0]
    devs = platform.get_devices()
    if len(devs) < 2:
        print("one device"); raise SystemExit(0)
    ctx = cl.Context(devs)
    q = cl.CommandQueue(ctx, devs[1])
    seed = cl.Program(ctx, '''__kernel void seed(__global uint* d, ulong n) {
        size_t i = get_global_id(0); if (i < n) d[i] = d[i] * 2654435761u + 12345u; }''').build().seed
    start = np.arange(1 << 18, dtype=np.uint32)
    a = pinstream.empty(ctx, start.shape, np.uint32); a[:] = start
    r = pinstream.stream(q, seed, inout=a, block=64 << 10, budget=1 << 20, passes=2)
    want = start.astype(np.uint64)
    for _ in range(2):
        want = (want * 2654435761 + 12345) & 0xFFFFFFFF
    assert np.array_equal(a, want.astype(np.uint32)), "wrong result on the second device"
    try:
        pinstream.stream(cl.CommandQueue(ctx, devs[0],
                         cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE),
                         seed, inout=a, block=64 << 10, budget=1 << 20)
        print("out-of-order queue taken"); raise SystemExit(1)
    except ValueError as e:
        assert "out of order" in str(e), e
    print("ok", r.blocks)
""")


def test_a_queue_on_the_second_of_two_devices_streams_there():
    """The run goes to the queue's device, whichever of the context's devices it is (PoCL's
    two CPU devices here: POCL_DEVICES is read when PoCL loads, so in a fresh process)."""
    import os
    env = dict(os.environ, POCL_DEVICES="pthread pthread")
    out = subprocess.run([sys.executable, "-c", SECOND_DEVICE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, (out.stdout, out.stderr)
    if out.stdout.strip() == "one device":
        pytest.skip("this OpenCL platform has one device (POCL_DEVICES reaches PoCL alone)")
    assert out.stdout.strip() == "ok 16", (out.stdout, out.stderr)
