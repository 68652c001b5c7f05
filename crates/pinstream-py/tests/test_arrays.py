"""pinstream.empty / pinstream.zeros: NumPy arrays in pinned memory, their dtypes and shapes,
copies through PyOpenCL, and their lifetime (freed with the last array, never while a copy
is in flight)."""

import gc
import weakref

import numpy as np
import pyopencl as cl
import pytest
from conftest import census, device_buffer, owner, round_trip

import pinstream

DTYPES = [
    np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
    np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
    np.longdouble, "S7", "U3", "M8[ns]", "m8[s]",
    np.dtype([("x", np.float32), ("n", np.int16)]),
]
SHAPES = [(), 1, (7,), (3, 4), (2, 3, 5), (1, 1, 1, 9), (4096, 3)]


def random_fill(a, seed=0):
    a.reshape(-1).view(np.uint8)[:] = np.random.default_rng(seed).integers(
        0, 256, a.nbytes, dtype=np.uint8)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_common_dtype_round_trips(ctx, queue, dtype):
    a = pinstream.empty(ctx, (1000,), dtype)
    b = pinstream.zeros(ctx, (1000,), dtype)
    assert a.dtype == np.dtype(dtype) and a.shape == (1000,)
    assert a.flags.c_contiguous and a.flags.writeable and a.flags.aligned
    random_fill(a, seed=1)
    assert round_trip(queue, a, b)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_shapes(ctx, queue, shape):
    a = pinstream.empty(ctx, shape, np.float32)
    expected = (shape,) if isinstance(shape, int) else shape
    assert a.shape == expected and a.size == int(np.prod(expected))
    a[...] = np.arange(a.size, dtype=np.float32).reshape(expected)
    b = pinstream.empty(ctx, shape, np.float32)
    assert round_trip(queue, a, b)
    np.testing.assert_array_equal(a, b)


def test_default_dtype_is_float64_like_numpy(ctx):
    assert pinstream.empty(ctx, 3).dtype == np.float64
    assert pinstream.zeros(ctx, [2, 2]).dtype == np.float64


def test_zeros_are_zero_even_where_memory_was_just_freed(ctx):
    for _ in range(3):
        a = pinstream.empty(ctx, (1 << 20,), np.uint8)
        a[:] = 0xAB
        del a
        z = pinstream.zeros(ctx, (1 << 20,), np.uint8)
        assert not z.any()
        del z


@pytest.mark.parametrize("strategy", ["register", "pageable", "mlock"])
def test_forced_strategy_zeros(ctx, strategy):
    try:
        z = pinstream.zeros(ctx, (3, 1000), np.int64, strategy=strategy)
    except pinstream.PinError as e:  # mlock under a small RLIMIT_MEMLOCK: the library says so
        assert strategy == "mlock" and "RLIMIT_MEMLOCK" in str(e)
        return
    assert not z.any()
    assert pinstream.info(z).strategy == strategy


def test_a_large_array_round_trips(ctx, queue):
    a = pinstream.empty(ctx, (64 << 20) // 4, np.float32)  # 64 MiB
    a[:] = np.arange(a.size, dtype=np.float32)
    b = pinstream.empty(ctx, a.shape, np.float32)
    assert round_trip(queue, a, b)


def test_memory_lives_while_any_view_lives(ctx):
    a = pinstream.zeros(ctx, (100, 100), np.float32)
    mem = weakref.ref(owner(a))
    view = a[10:20, 5]
    flat = a.reshape(-1)
    assert census()[:2] == (1, 40000)
    del a
    assert mem() is not None
    view[:] = 7
    assert flat[10 * 100 + 5] == 7
    del view
    assert mem() is not None
    del flat
    gc.collect()
    assert mem() is None
    assert census()[:2] == (0, 0)


def test_buffer_protocol_exports_hold_the_memory(ctx):
    a = pinstream.empty(ctx, 16, np.uint8)
    mem = weakref.ref(owner(a))
    mv = memoryview(owner(a))
    assert mv.nbytes == 16 and not mv.readonly and mv.format == "B"
    del a
    gc.collect()
    assert mem() is not None
    mv[3] = 9
    assert mv[3] == 9
    mv.release()
    del mv
    gc.collect()
    assert mem() is None


def test_upload_returns_before_the_copy_and_gc_waits_for_it(ctx, queue):
    """A non-blocking upload gated on a user event: enqueue_copy returns while the copy
    cannot have run; deleting the array and collecting frees nothing until the copy is done,
    and the device gets the data."""
    gate = cl.UserEvent(ctx)
    a = pinstream.empty(ctx, (1 << 20,), np.float32)
    a[:] = 1.5
    mem = weakref.ref(owner(a))
    buf = device_buffer(ctx, a.nbytes)
    evt = cl.enqueue_copy(queue, buf, a, is_blocking=False, wait_for=[gate])
    assert evt.command_execution_status != cl.command_execution_status.COMPLETE
    del a
    gc.collect()
    assert mem() is not None, "memory of a copy in flight was freed"
    gate.set_status(cl.command_execution_status.COMPLETE)
    evt.wait()
    del evt
    gc.collect()
    assert mem() is None
    out = np.empty((1 << 20,), np.float32)
    cl.enqueue_copy(queue, out, buf)
    assert (out == 1.5).all()


def test_download_in_flight_keeps_the_memory(ctx, queue):
    src = np.arange(1 << 20, dtype=np.float32)
    buf = device_buffer(ctx, src.nbytes)
    cl.enqueue_copy(queue, buf, src)
    gate = cl.UserEvent(ctx)
    a = pinstream.empty(ctx, src.shape, np.float32)
    keep = a[-4:]  # a small view to read the result through, after the rest is gone
    mem = weakref.ref(owner(a))
    evt = cl.enqueue_copy(queue, a, buf, is_blocking=False, wait_for=[gate])
    del a
    gc.collect()
    gate.set_status(cl.command_execution_status.COMPLETE)
    evt.wait()
    np.testing.assert_array_equal(keep, src[-4:])
    del keep, evt
    gc.collect()
    assert mem() is None


def test_deleting_array_and_event_of_a_running_copy_is_safe(ctx, queue):
    """PyOpenCL's event for a non-blocking copy waits for the copy when it is collected: the
    memory goes only after that (no crash, no use after free)."""
    for _ in range(4):
        a = pinstream.empty(ctx, (16 << 20) // 4, np.float32)
        a[:] = 3.0
        buf = device_buffer(ctx, a.nbytes)
        evt = cl.enqueue_copy(queue, buf, a, is_blocking=False)
        del a, evt
        gc.collect()
        out = np.empty((16 << 20) // 4, np.float32)
        cl.enqueue_copy(queue, out, buf)
        assert (out == 3.0).all()


def test_info_of_allocated_memory(ctx):
    a = pinstream.empty(ctx, (10, 10), np.float64)
    i = pinstream.info(a)
    assert i.owns_memory and not i.registered
    assert i.nbytes == 800 and i.range[1] - i.range[0] == 800
    assert i.array_range == i.range
    assert i.chunks == [(0, 800)]
    assert i.strategy in {"register", "nv-host", "intel-usm", "alloc-host-ptr", "svm", "mlock",
                          "pageable"}
    # PoCL's CPU device: nothing to pin, and the info says so (with the basis).
    if all(d.type & cl.device_type.CPU for d in ctx.devices):
        assert i.pin_state == "not-needed" and not i.pinned
        assert "CPU devices only" in i.basis
        assert i.vram_cost is None and "not measurable" in i.vram_note
    # A view inside the memory reports the same region, and its own range.
    j = pinstream.info(a[5])
    assert j.range == i.range and j.array_range == (i.range[0] + 400, i.range[0] + 480)
    assert str(i).startswith("800 bytes at ")


def test_measure_vram_off(ctx):
    a = pinstream.empty(ctx, 8, measure_vram=False)
    i = pinstream.info(a)
    assert i.vram_cost is None and "not measured" in i.vram_note


def test_unregister_refuses_allocated_memory(ctx):
    a = pinstream.empty(ctx, 8)
    with pytest.raises(pinstream.NotRegisteredError, match="allocated by pinstream.empty"):
        pinstream.unregister(a)


def test_registering_allocated_memory_overlaps(ctx):
    a = pinstream.empty(ctx, 8)
    with pytest.raises(pinstream.AlreadyRegisteredError, match="allocated by pinstream.empty"):
        pinstream.register(ctx, a)
