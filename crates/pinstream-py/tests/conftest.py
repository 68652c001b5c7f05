"""Fixtures for the pinstream Python tests: a PyOpenCL context on the first OpenCL device
(PoCL's CPU device in CI; the tests need no GPU), a queue on it, and helpers."""

import gc
import re

import numpy as np
import pyopencl as cl
import pytest

import pinstream
from pinstream import _native


def first_device():
    platforms = cl.get_platforms()  # raises when no OpenCL platform is installed
    for p in platforms:
        devices = p.get_devices()
        if devices:
            return devices[0]
    raise RuntimeError("no OpenCL device: install one (apt-get install pocl-opencl-icd)")


@pytest.fixture(scope="session")
def ctx():
    return cl.Context([first_device()])


@pytest.fixture(scope="session")
def queue(ctx):
    return cl.CommandQueue(ctx)


def census():
    """(live allocations, their bytes, live registrations), after a full collection."""
    gc.collect()
    return _native.census()


def owner(array):
    """The PinnedMemory object an array from pinstream.empty/zeros is a view of."""
    obj = array
    while obj is not None and not isinstance(obj, pinstream.PinnedMemory):
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
    assert obj is not None, "the array is not a view of pinstream memory"
    return obj


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """Every test frees what it pinned: no allocation or registration outlives it."""
    before = census()
    yield
    assert census() == before


def device_buffer(ctx, nbytes):
    return cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)


def round_trip(queue, src, dst):
    """src -> device -> dst, through non-blocking copies waited for at the end."""
    buf = device_buffer(queue.context, src.nbytes)
    up = cl.enqueue_copy(queue, buf, src, is_blocking=False)
    down = cl.enqueue_copy(queue, dst, buf, is_blocking=False, wait_for=[up])
    down.wait()
    return np.array_equal(src.reshape(-1).view(np.uint8), dst.reshape(-1).view(np.uint8))


def assert_speaks_python(text, spelling):
    """The message names the fix as Python spells it, and no other front's flag or function."""
    assert spelling in text, text
    assert not re.search(r"(^|[\s`(])--[a-z]", text), text
    for other in ["psHostAlloc", "PS_STRATEGY", "HostRegion::", "pinstream devices"]:
        assert other not in text, text
