"""Bad input: every mistake gets a Python exception that says what to do, never a crash."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pyopencl as cl
import pytest
from conftest import assert_speaks_python

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
    with pytest.raises(pinstream.PinError, match="cl_nv_create_buffer") as e:
        pinstream.empty(ctx, 4, strategy="nv-host")
    assert_speaks_python(str(e.value), 'strategy="auto"')



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


FAILING_PINS = textwrap.dedent("""
    import numpy as np, pyopencl as cl, pinstream
    dev = [d for p in cl.get_platforms() for d in p.get_devices()][0]
    ctx = cl.Context([dev])
    for strategy in ["register", "mlock"]:
        try:
            pinstream.empty(ctx, 1 << 20, np.uint8, strategy=strategy)
            print(strategy, "pinned")
        except pinstream.PinError as e:
            print(strategy, "PinError:", e)
    for strategy in ["pageable", "auto"]:
        try:
            a = pinstream.zeros(ctx, 1 << 20, np.uint8, strategy=strategy)
        except pinstream.PinError as e:
            print(strategy, "PinError:", e)
            continue
        i = pinstream.info(a)
        print(strategy, "gives", i.strategy, i.pin_state, int(a.sum()))
    print("cpu" if dev.type & cl.device_type.CPU else "not a cpu")
""")


def test_a_failed_pin_is_a_pin_error_and_baselines_by_name_still_work():
    """Every pin over 64 KiB fails (the library's test hook): a forced pinning strategy raises
    PinError with the library's reason; the pageable baseline asked for by name still gives
    memory; on a CPU device (nothing to pin) so does auto, and on a GPU auto raises PinError
    naming the baselines (no unpinned memory in a pin's place: seen on NVIDIA's driver)."""
    env = dict(os.environ, PINSTREAM_INJECT_FAULT="pin:65536")
    out = subprocess.run([sys.executable, "-c", FAILING_PINS], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("register PinError:") and "CL_OUT_OF_RESOURCES" in lines[0], lines
    assert lines[1].startswith("mlock PinError:") and "could not lock" in lines[1], lines
    cpu = lines[4] == "cpu"
    state = "not-needed" if cpu else "not-pinned"
    assert lines[2] == f"pageable gives pageable {state} 0", lines
    if cpu:
        assert lines[3].startswith("auto gives ") and lines[3].endswith(" not-needed 0"), lines
    else:
        assert lines[3].startswith("auto PinError: no strategy could pin 1 MiB"), lines
        assert "`pageable` baseline by name" in lines[3], lines
