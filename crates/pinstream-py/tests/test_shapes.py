"""Edge shapes as NumPy has them: 0-d arrays, zero-size shapes, and buffer exporters that give
no shape or no strides (ctypes arrays), in pinstream.empty/zeros, register, unregister and info."""

import ctypes

import numpy as np
import pyopencl as cl
import pytest
from conftest import census, round_trip

import pinstream

ZERO_SIZE_SHAPES = [0, (0,), (3, 0), (0, 5, 2)]


def test_zero_d_arrays_from_pinstream(ctx, queue):
    a = pinstream.zeros(ctx, (), np.float32)
    assert a.shape == () and a.ndim == 0 and a == 0
    a[()] = 7
    i = pinstream.info(a)
    assert i.owns_memory and i.array_range[1] - i.array_range[0] == 4
    b = pinstream.empty(ctx, (), np.float32)
    assert round_trip(queue, a, b) and b == 7


def test_zero_d_arrays_register(ctx, queue):
    a = np.array(3.5)
    assert pinstream.register(ctx, a) is a
    i = pinstream.info(a)
    assert i.registered and i.nbytes == 8
    out = np.zeros((), np.float64)
    assert round_trip(queue, a, out) and out == 3.5
    pinstream.unregister(a)
    assert census()[2] == 0


@pytest.mark.parametrize("make", [
    lambda: (ctypes.c_double * 1000)(),
    lambda: (ctypes.c_int32 * 50 * 40)(),  # 2-d: a shape, but no strides
])
def test_ctypes_arrays_register(ctx, make):
    data = make()
    pinstream.register(ctx, data)
    i = pinstream.info(data)
    assert i.registered and i.array_range[1] - i.array_range[0] == ctypes.sizeof(data)
    pinstream.unregister(data)
    assert census()[2] == 0


@pytest.mark.parametrize("shape", ZERO_SIZE_SHAPES)
@pytest.mark.parametrize("make", [pinstream.empty, pinstream.zeros])
def test_zero_size_shapes_are_empty_arrays_with_nothing_pinned(ctx, shape, make):
    before = census()
    a = make(ctx, shape, np.float32)
    ref = np.zeros(shape, np.float32)
    assert (a.shape, a.dtype, a.size, a.flags.c_contiguous) == (ref.shape, ref.dtype, 0, True)
    assert census() == before
    i = pinstream.info(a)
    assert (i.strategy, i.pinned, i.pin_state, i.nbytes, i.chunks) == (
        "none", False, "not-needed", 0, [])


def test_zero_size_still_checks_the_arguments(ctx, queue):
    with pytest.raises(ValueError, match="unknown strategy `fast`"):
        pinstream.empty(ctx, 0, strategy="fast")
    with pytest.raises(TypeError, match="queue.context"):
        pinstream.empty(queue, (3, 0))
    with pytest.raises(TypeError, match="queue.context"):
        pinstream.register(queue, np.zeros(0))
    assert pinstream.zeros(ctx, 5, "V0").shape == np.zeros(5, "V0").shape


@pytest.mark.parametrize("make", [
    lambda: np.zeros(0), lambda: np.zeros((3, 0)), bytearray, lambda: (ctypes.c_char * 0)(),
])
def test_zero_size_arrays_register_as_nothing(ctx, make):
    a = make()
    assert pinstream.register(ctx, a) is a
    assert census()[2] == 0
    assert pinstream.info(a).strategy == "none"
    pinstream.unregister(a)  # nothing was pinned: nothing to undo


def test_empty_view_inside_pinned_memory_is_described_by_it(ctx):
    a = pinstream.zeros(ctx, 100, np.uint8)
    i = pinstream.info(a[10:10])
    assert i.owns_memory and i.nbytes >= 100 and i.array_range[0] == i.array_range[1]


def test_an_exporter_past_the_end_of_the_address_space_is_refused(ctx, queue):
    """A ctypes array at a false address near 2**64: its bytes would end past the address
    space (the sum once overflowed, a PanicException). Refused by every call, naming it."""
    far = (ctypes.c_char * 16).from_address(2**64 - 8)
    dst = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
    calls = [
        ("info: array", lambda: pinstream.info(far)),
        ("device_buffer: array", lambda: pinstream.device_buffer(far)),
        ("register: array", lambda: pinstream.register(ctx, far)),
        ("unregister: array", lambda: pinstream.unregister(far)),
        ("gather: src", lambda: pinstream.gather(queue, dst, far, [0], [1], [0])),
    ]
    for name, call in calls:
        with pytest.raises(ValueError, match=f"{name}: its 16 bytes at 0xfffffffffffffff8 run past the end of the address space"):
            call()
    # An empty one at the last address: nothing to look up, nothing pinned.
    last = (ctypes.c_char * 0).from_address(2**64 - 1)
    assert pinstream.info(last).strategy == "none"
    with pytest.raises(pinstream.NotRegisteredError, match="not memory pinstream pins"):
        pinstream.device_buffer(last)
