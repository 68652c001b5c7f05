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


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                   np.int64, np.uint64])
def test_offsets_and_sizes_of_every_integer_dtype_are_taken_exactly(ctx, queue, dtype):
    src = pinstream.empty(ctx, 4096, np.uint8, mapped=True)
    src[:] = np.arange(4096) % 253
    dst = filled_buffer(ctx, queue, 4096, 0)
    so, sizes, do = (np.array(v, dtype) for v in ([3, 100], [20, 27], [60, 0]))
    pinstream.gather(queue, dst, src, so, sizes, do).wait()
    got = device_bytes(queue, dst)
    assert (got[60:80] == src[3:23]).all() and (got[0:27] == src[100:127]).all()
    back = pinstream.zeros(ctx, 4096, np.uint8, mapped=True)
    pinstream.scatter(queue, back, dst, do, sizes, so).wait()
    assert (back[3:23] == src[3:23]).all() and (back[100:127] == src[100:127]).all()


def test_offsets_near_2_64_are_refused_not_wrapped(ctx, queue):
    """A uint64 offset beside int64 sizes once went through float64: 2**64 - 8 rounded to
    2**64, which wrapped to 0, and the call copied bytes 0..16 with no error."""
    src = pinstream.empty(ctx, 4096, np.uint8, mapped=True)
    dst = filled_buffer(ctx, queue, 4096, 0)
    near = np.array([2**64 - 8], np.uint64)
    with pytest.raises(ValueError, match=r"piece 0 \(16 bytes at byte 18446744073709551608 of src\) ends past src"):
        pinstream.gather(queue, dst, src, near, [16], [0])
    with pytest.raises(ValueError, match=r"ends past the 4096-byte device buffer dst"):
        pinstream.gather(queue, dst, src, [0], [16], near)
    with pytest.raises(ValueError, match=r"ends past src"):
        pinstream.gather(queue, dst, src, [8], np.array([2**64 - 4], np.uint64), [0])
    with pytest.raises(ValueError, match=r"ends past dst"):
        pinstream.scatter(queue, src, dst, [0], [16], near)
    with pytest.raises(ValueError, match=r"src_offsets\[1\] is 18446744073709551616, past 2\*\*64 - 1"):
        pinstream.gather(queue, dst, src, [0, 2**64], [16, 16], [0, 16])
    with pytest.raises(ValueError, match=r"sizes\[0\] is -1, a negative value"):
        pinstream.gather(queue, dst, src, [0], [-1], [2**64 - 1])  # an object column
    for floats in ([0.0], np.array([0.5]), [float(2**63)]):
        with pytest.raises(TypeError, match="src_offsets must be a 1-D sequence of integers"):
            pinstream.gather(queue, dst, src, floats, [16], [0])
    with pytest.raises(TypeError, match="sizes must be a 1-D sequence of integers"):
        pinstream.gather(queue, dst, src, [0], [True], [0])
    assert (device_bytes(queue, dst) == 0).all(), "a refused call wrote"


def test_a_read_only_destination_and_a_write_only_source_are_refused(ctx, queue):
    """The copy kernel writes gather's dst and reads scatter's src: a CL_MEM_READ_ONLY dst
    and a CL_MEM_WRITE_ONLY src are refused as the C calls refuse them, before anything runs."""
    arr = pinstream.empty(ctx, 4096, np.uint8, mapped=True)
    arr[:] = 5
    one = ([0], [16], [0])
    mf = cl.mem_flags
    read_only = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.zeros(4096, np.uint8))
    with pytest.raises(ValueError, match=r"gather: dst was made with CL_MEM_READ_ONLY \(cl.mem_flags.READ_ONLY\), and gather writes it with a kernel: pass a buffer made with cl.mem_flags.READ_WRITE"):
        pinstream.gather(queue, read_only, arr, *one)
    assert (device_bytes(queue, read_only) == 0).all()
    write_only = cl.Buffer(ctx, mf.WRITE_ONLY, 4096)
    with pytest.raises(ValueError, match=r"scatter: src was made with CL_MEM_WRITE_ONLY \(cl.mem_flags.WRITE_ONLY\), and scatter reads it"):
        pinstream.scatter(queue, arr, write_only, *one)
    assert (arr == 5).all()
    # The other way round is what the kernel needs: allowed.
    pinstream.gather(queue, write_only, arr, *one).wait()
    pinstream.scatter(queue, arr, read_only, *one).wait()
    assert (arr[:16] == 0).all() and (arr[16:] == 5).all()


def test_refusals_name_the_calls_own_parameters(ctx, queue):
    """Every refusal names the call and its parameters as Python spells them (src, dst,
    queue, src_offsets, sizes, dst_offsets), never the library's terms for another front
    (uploads, "(host bytes, device offset) pairs", "the mapped region")."""
    other = cl.Context(ctx.devices)
    arr = pinstream.zeros(ctx, 4096, np.uint8, mapped=True)
    buf = filled_buffer(ctx, queue, 4096, 0)
    cases = [
        (lambda: pinstream.gather(queue, buf, arr, [0, 0], [16, 16], [0, 8]),
         "gather: pieces 0 and 1 overlap in dst"),
        (lambda: pinstream.scatter(queue, arr, buf, [0, 0], [16, 16], [0, 8]),
         "scatter: pieces 0 and 1 overlap in dst"),
        (lambda: pinstream.gather(queue, buf, arr, [], [], []),
         "gather: at least one piece is needed: give src_offsets, sizes and dst_offsets"),
        (lambda: pinstream.gather(queue, buf, arr, [0], [0], [0]), "gather: sizes[0] is 0"),
        (lambda: pinstream.scatter(queue, arr, buf, [4090], [16], [0]),
         "scatter: piece 0 (16 bytes at byte 4090 of src) ends past the 4096-byte device buffer src"),
        (lambda: pinstream.gather(queue, cl.Buffer(other, cl.mem_flags.READ_WRITE, 64), arr, [0], [1], [0]),
         "gather: dst is not a buffer of queue's context"),
        (lambda: pinstream.scatter(cl.CommandQueue(other), arr, buf, [0], [1], [0]),
         "scatter: src is not a buffer of queue's context"),
        (lambda: pinstream.gather(queue, buf, pinstream.zeros(other, 64, np.uint8, mapped=True), [0], [1], [0]),
         "gather: src was allocated in another context than queue's"),
        (lambda: pinstream.gather(queue, buf, pinstream.zeros(ctx, 64, np.uint8), [0], [1], [0]),
         "gather: src: this memory"),
        (lambda: pinstream.scatter(queue, pinstream.zeros(ctx, 64, np.uint8), buf, [0], [1], [0]),
         "scatter: dst: this memory"),
        (lambda: pinstream.gather(queue, buf, np.zeros(64, np.uint8), [0], [1], [0]),
         "gather: src 0x"),
    ]
    for call, opening in cases:
        with pytest.raises(pinstream.PinstreamError if "0x" in opening else ValueError) as e:
            call()
        text = str(e.value)
        assert text.startswith(opening), text
        for foreign in ("upload", "pairs", "mapped region", "the array 0x", "on the device"):
            assert foreign not in text, text
    assert "mapped=True" in str(e.value)
