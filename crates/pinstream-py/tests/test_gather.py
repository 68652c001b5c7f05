"""pinstream.gather / scatter: pieces of a mapped array copied into a device buffer, and back
into the array, by one kernel in place, checked against NumPy; overlapping pieces refused
unless vouched (disjoint=True); bounds refused either way."""

import numpy as np
import pyopencl as cl
import pytest

import pinstream

N, LEN, SLOT = 256, 100, 128


def layout():
    """N pieces of LEN bytes, shuffled on both sides, SLOT bytes apart."""
    rng = np.random.default_rng(7)
    src_offsets = rng.permutation(N) * SLOT + 3
    dst_offsets = rng.permutation(N) * SLOT
    return src_offsets, np.full(N, LEN), dst_offsets


def device_bytes(queue, buf):
    out = np.empty(buf.size, np.uint8)
    cl.enqueue_copy(queue, out, buf)
    return out


def filled_buffer(ctx, queue, n, value):
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n)
    cl.enqueue_copy(queue, buf, np.full(n, value, np.uint8))
    return buf


@pytest.mark.parametrize("disjoint", [False, True])
def test_pieces_of_a_mapped_array_land_where_numpy_puts_them(ctx, queue, disjoint):
    src = pinstream.empty(ctx, N * SLOT + 64, np.uint8, mapped=True)
    src[:] = np.arange(src.size, dtype=np.uint64) * 7 % 251
    dst = filled_buffer(ctx, queue, N * SLOT, 0xEE)
    so, sizes, do = layout()
    ev = pinstream.gather(queue, dst, src, so, sizes, do, disjoint=disjoint)
    assert isinstance(ev, cl.Event)
    ev.wait()
    want = np.full(N * SLOT, 0xEE, np.uint8)
    for s, n, d in zip(so, sizes, do):
        want[d:d + n] = src[s:s + n]
    assert np.array_equal(device_bytes(queue, dst), want)


def test_overlaps_are_refused_unless_vouched_and_never_reach_past_the_pieces(ctx, queue):
    src = pinstream.zeros(ctx, N * SLOT + 64, np.uint8, mapped=True)
    src[:] = 1
    dst = filled_buffer(ctx, queue, N * SLOT, 0xEE)
    so, sizes, do = layout()
    first = int(np.argmin(do))  # the piece at device offset 0
    other = (first + 1) % N
    do[other] = 20  # 20..120 overlaps 0..100, inside the first slot
    with pytest.raises(ValueError, match="overlap"):
        pinstream.gather(queue, dst, src, so, sizes, do)
    pinstream.gather(queue, dst, src, so, sizes, do, disjoint=True).wait()
    got = device_bytes(queue, dst)
    assert got[120:SLOT].tolist() == [0xEE] * (SLOT - 120), "nothing past the pieces"
    assert (got[:120] == 1).all()


def test_bounds_are_checked_when_vouched(ctx, queue):
    src = pinstream.empty(ctx, N * SLOT + 64, np.uint8, mapped=True)
    dst = filled_buffer(ctx, queue, N * SLOT, 0)
    so, sizes, do = layout()
    past_dst = do.copy()
    past_dst[5] = N * SLOT - 10
    with pytest.raises(ValueError, match="ends past the .*device buffer"):
        pinstream.gather(queue, dst, src, so, sizes, past_dst, disjoint=True)
    past_src = so.copy()
    past_src[7] = src.size - 10
    with pytest.raises(ValueError, match="ends past src"):
        pinstream.gather(queue, dst, src, past_src, sizes, do, disjoint=True)
    # A view: its own bytes bound the pieces, not the mapped block around it.
    view = src[1000:]
    with pytest.raises(ValueError, match="ends past src"):
        pinstream.gather(queue, dst, view, so, sizes, do, disjoint=True)
    with pytest.raises(ValueError, match="negative"):
        pinstream.gather(queue, dst, src, -so, sizes, do, disjoint=True)
    with pytest.raises(ValueError, match="differ in length"):
        pinstream.gather(queue, dst, src, so[:-1], sizes, do, disjoint=True)
    with pytest.raises(ValueError, match="at least one piece"):
        pinstream.gather(queue, dst, src, [], [], [], disjoint=True)


def test_memory_that_is_not_mapped_is_refused(ctx, queue):
    plain = pinstream.empty(ctx, 4096, np.uint8)
    dst = filled_buffer(ctx, queue, 4096, 0)
    with pytest.raises(ValueError, match="mapped=True"):
        pinstream.gather(queue, dst, plain, [0], [16], [0], disjoint=True)
    with pytest.raises(TypeError, match="pyopencl.Buffer"):
        pinstream.gather(queue, plain, plain, [0], [16], [0])


def test_release_then_gather_again(ctx, queue):
    src = pinstream.zeros(ctx, 4096, np.uint8, mapped=True)
    src[:16] = 9
    dst = filled_buffer(ctx, queue, 4096, 0)
    pinstream.gather(queue, dst, src, [0], [16], [100]).wait()
    pinstream.release_gather(ctx)
    pinstream.release_gather(ctx)  # none kept: nothing to do
    pinstream.gather(queue, dst, src, [0], [16], [200]).wait()
    got = device_bytes(queue, dst)
    assert (got[100:116] == 9).all() and (got[200:216] == 9).all()


@pytest.mark.parametrize("disjoint", [False, True])
def test_a_scatter_writes_the_pieces_into_the_mapped_array_and_nothing_else(ctx, queue, disjoint):
    data = (np.arange(N * SLOT, dtype=np.uint64) * 5 % 253).astype(np.uint8)
    src = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, data.nbytes)
    cl.enqueue_copy(queue, src, data)
    dst = pinstream.empty(ctx, N * SLOT + 64, np.uint8, mapped=True)
    dst[:] = 0xEE
    do, sizes, so = layout()  # the array's offsets first, as gather's
    pinstream.scatter(queue, dst, src, so, sizes, do, disjoint=disjoint).wait()
    want = np.full(dst.size, 0xEE, np.uint8)
    for s, n, d in zip(so, sizes, do):
        want[d:d + n] = data[s:s + n]
    assert np.array_equal(dst, want)


def test_a_scatter_refuses_overlaps_unless_vouched_and_bounds_always(ctx, queue):
    src = filled_buffer(ctx, queue, N * SLOT, 7)
    dst = pinstream.zeros(ctx, N * SLOT + 64, np.uint8, mapped=True)
    do, sizes, so = layout()
    first = int(np.argmin(do))
    do[(first + 1) % N] = do[first] + 20
    with pytest.raises(ValueError, match="overlap"):
        pinstream.scatter(queue, dst, src, so, sizes, do)
    pinstream.scatter(queue, dst, src, so, sizes, do, disjoint=True).wait()
    assert (dst[do[first]:do[first] + 120] == 7).all() and dst[do[first] + 120] == 0
    with pytest.raises(ValueError, match="ends past dst"):
        pinstream.scatter(queue, dst[1000:], src, so, sizes, do, disjoint=True)
    past = so.copy()
    past[3] = N * SLOT - 10
    with pytest.raises(ValueError, match="ends past the .*device buffer"):
        pinstream.scatter(queue, dst, src, past, sizes, do, disjoint=True)
    with pytest.raises(ValueError, match="read-only"):
        view = dst[:]
        view.flags.writeable = False
        pinstream.scatter(queue, view, src, so, sizes, do, disjoint=True)


def test_strided_views_are_refused_both_ways(ctx, queue):
    """A view's offsets would run over bytes that are not its own (every other byte, or
    backwards): refused, and the array is left as it was."""
    arr = pinstream.zeros(ctx, 4096, np.uint8, mapped=True)
    buf = filled_buffer(ctx, queue, 4096, 9)
    one = (np.array([0]), np.array([16]), np.array([0]))
    for view in (arr[::2], arr[:1000][::-1]):
        with pytest.raises(ValueError, match="not C-contiguous"):
            pinstream.gather(queue, buf, view, *one)
        with pytest.raises(ValueError, match="not C-contiguous"):
            pinstream.scatter(queue, view, buf, *one)
    assert (arr == 0).all()
