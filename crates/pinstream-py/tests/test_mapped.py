"""Mapped memory: pinstream.empty(..., mapped=True) and pinstream.device_buffer, with a PyOpenCL
kernel that reads and writes the array in place."""

import gc

import numpy as np
import pyopencl as cl
import pytest
from conftest import assert_speaks_python

import pinstream

SRC = """
__kernel void bump(__global uint *a, uint first) {
    size_t i = first + get_global_id(0);
    a[i] = a[i] * 2u + 1u;
}
"""


def bump(ctx, queue, buf, first, count):
    prg = cl.Program(ctx, SRC).build()
    prg.bump(queue, (count,), None, buf, np.uint32(first)).wait()


def test_a_kernel_reads_and_writes_a_mapped_array_in_place(ctx, queue):
    a = pinstream.empty(ctx, 8192, np.uint32, mapped=True)
    a[:] = np.arange(8192, dtype=np.uint32)
    i = pinstream.info(a)
    assert i.mapped and i.zero_copy and i.zero_copy in i.reason
    buf, off = pinstream.device_buffer(a)
    assert isinstance(buf, cl.Buffer) and off == 0 and buf.size == a.nbytes
    # A view from word 1000 on: the same buffer, at its own offset.
    view = a[1000:]
    vbuf, voff = pinstream.device_buffer(view)
    assert vbuf.int_ptr == buf.int_ptr and voff == 4000
    bump(ctx, queue, vbuf, voff // 4, 5000)
    want = np.arange(8192, dtype=np.uint32)
    want[1000:6000] = want[1000:6000] * 2 + 1
    assert np.array_equal(a, want)
    zeros = pinstream.zeros(ctx, 4096, np.uint8, mapped=True)
    assert not zeros.any() and pinstream.info(zeros).mapped


def test_the_buffer_keeps_the_memory_alive(ctx, queue):
    a = pinstream.empty(ctx, 4096, np.uint32, mapped=True)
    a[:] = np.arange(4096, dtype=np.uint32)
    buf, _ = pinstream.device_buffer(a)
    del a
    gc.collect()
    bump(ctx, queue, buf, 0, 4096)
    back = np.empty(4096, np.uint32)
    cl.enqueue_copy(queue, back, buf)
    assert np.array_equal(back, np.arange(4096, dtype=np.uint32) * 2 + 1)


def test_what_is_not_mapped_is_refused(ctx):
    plain = pinstream.empty(ctx, 64, np.uint8)
    assert not pinstream.info(plain).mapped and pinstream.info(plain).zero_copy is None
    with pytest.raises(ValueError, match=r"mapped=True") as e:
        pinstream.device_buffer(plain)
    assert_speaks_python(str(e.value), "pinstream.empty(ctx, shape, dtype, mapped=True)")
    with pytest.raises(pinstream.NotRegisteredError):
        pinstream.device_buffer(np.zeros(16, np.uint8))
    with pytest.raises(ValueError, match="without a strategy"):
        pinstream.empty(ctx, 64, np.uint8, mapped=True, strategy="register")
    too_big = ctx.devices[0].max_mem_alloc_size + 1
    with pytest.raises(pinstream.PinError, match="CL_DEVICE_MAX_MEM_ALLOC_SIZE") as e:
        pinstream.empty(ctx, too_big, np.uint8, mapped=True)
    assert_speaks_python(str(e.value), "one mapped array per part")
