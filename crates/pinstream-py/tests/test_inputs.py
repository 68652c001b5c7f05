"""Bad input: every mistake gets a Python exception that says what to do, never a crash."""

import numpy as np
import pyopencl as cl
import pytest

import pinstream


class FakeContext:
    def __init__(self, int_ptr):
        self.int_ptr = int_ptr


def test_wrong_context_objects(ctx, queue):
    with pytest.raises(TypeError, match="queue.context"):
        pinstream.empty(queue, 4)
    with pytest.raises(TypeError, match="got a Device"):
        pinstream.empty(ctx.devices[0], 4)
    with pytest.raises(TypeError, match="int_ptr"):
        pinstream.empty(None, 4)
    with pytest.raises(TypeError, match="int_ptr"):
        pinstream.empty("context", 4)
    with pytest.raises(TypeError):
        pinstream.empty(FakeContext("0x1234"), 4)
    with pytest.raises(ValueError, match="not a cl_context"):
        pinstream.empty(FakeContext(0), 4)
    with pytest.raises(TypeError, match="queue.context"):
        pinstream.register(queue, np.zeros(4))


def test_any_object_with_int_ptr_is_a_context(ctx):
    a = pinstream.zeros(FakeContext(ctx.int_ptr), 4, np.int32)
    assert a.tolist() == [0, 0, 0, 0]


def test_shapes_that_are_wrong(ctx):
    with pytest.raises(ValueError, match="negative dimensions"):
        pinstream.empty(ctx, (3, -1))
    with pytest.raises(ValueError, match="negative dimensions"):
        pinstream.empty(ctx, -5)
    with pytest.raises(TypeError, match="shape must be"):
        pinstream.empty(ctx, (2.5, 3))
    with pytest.raises(TypeError, match="shape must be"):
        pinstream.empty(ctx, "3")


def test_zero_size_gets_the_librarys_message(ctx):
    for shape in [0, (0,), (3, 0, 2)]:
        with pytest.raises(ValueError, match="larger than 0 bytes"):
            pinstream.empty(ctx, shape)
    with pytest.raises(ValueError, match="larger than 0 bytes"):
        pinstream.zeros(ctx, 5, "V0")


def test_too_large(ctx):
    with pytest.raises(ValueError, match="too large"):
        pinstream.empty(ctx, (1 << 40, 1 << 40))
    with pytest.raises(pinstream.PinError, match=r"exceeds the .*: choose a smaller size"):
        pinstream.empty(ctx, 1 << 50, np.uint8)


def test_unknown_and_object_dtypes(ctx):
    with pytest.raises(TypeError):
        pinstream.empty(ctx, 4, "float33")
    with pytest.raises(TypeError, match="Python object references"):
        pinstream.empty(ctx, 4, object)
    with pytest.raises(TypeError, match="Python object references"):
        pinstream.empty(ctx, 4, np.dtype([("a", np.int32), ("o", object)]))


def test_unknown_strategy(ctx):
    with pytest.raises(ValueError, match="unknown strategy `fast`"):
        pinstream.empty(ctx, 4, strategy="fast")


def test_strategy_the_device_lacks(ctx):
    if any("cl_nv_create_buffer" in d.extensions for d in ctx.devices):
        pytest.skip("this device offers nv-host")
    with pytest.raises(pinstream.PinError, match="cl_nv_create_buffer"):
        pinstream.empty(ctx, 4, strategy="nv-host")


def test_released_context_is_still_usable_through_arrays():
    """The arrays retain the context: dropping PyOpenCL's object first is fine."""
    import gc

    dev = cl.get_platforms()[0].get_devices()[0]
    c = cl.Context([dev])
    a = pinstream.zeros(c, 1000, np.float32)
    del c
    gc.collect()
    a[:] = 2
    assert a.sum() == 2000


def test_exception_hierarchy():
    for e in [pinstream.PinError, pinstream.NotPinnableError, pinstream.AlreadyRegisteredError,
              pinstream.NotRegisteredError, pinstream.OpenCLError]:
        assert issubclass(e, pinstream.PinstreamError)
    assert issubclass(pinstream.PinstreamError, Exception)
    assert pinstream.PinstreamError.__module__ == "pinstream"
