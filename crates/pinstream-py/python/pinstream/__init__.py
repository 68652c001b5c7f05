"""pinstream: pinned host memory with no VRAM cost for PyOpenCL, as NumPy arrays.

What ``cudaMallocHost`` and ``cudaHostRegister`` give CUDA programs, for OpenCL contexts:

* ``empty(ctx, shape, dtype)`` / ``zeros(...)``: a new NumPy array in pinned memory. The
  memory is freed when the last array viewing it is garbage-collected.
* ``register(ctx, array)`` / ``unregister(array)``: pin an existing writable, C-contiguous
  array in place, and unpin it.
* ``info(array)``: the strategy, whether the driver really pinned it (and the basis), the VRAM
  cost, the range and its chunks.
* ``empty(ctx, shape, dtype, mapped=True)`` and ``device_buffer(array)``: mapped memory, which
  kernels read and write in place across the bus (``cudaHostAllocMapped`` and
  ``cudaHostGetDevicePointer``): a ``pyopencl.Buffer`` over it, and the array's offset in it.
* ``stream(queue, kernel, inout=array)``: streams pinned arrays larger than VRAM through the
  caller's PyOpenCL kernel, block by block, with uploads, kernels and downloads overlapped
  inside a VRAM budget; returns a :class:`StreamReport`.

``ctx`` is a ``pyopencl.Context``, or any object whose ``int_ptr`` is a live ``cl_context``
handle as an integer. After pinning, plain ``pyopencl.enqueue_copy(queue, buf, arr,
is_blocking=False)`` runs at pinned speed.
"""

from __future__ import annotations

import glob
import math
import operator
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._native import __version__
from ._native import (
    AlreadyRegisteredError,
    NotPinnableError,
    NotRegisteredError,
    OpenCLError,
    PinError,
    PinnedMemory,
    PinstreamError,
)

__all__ = [
    "__version__",
    "empty",
    "zeros",
    "register",
    "unregister",
    "info",
    "device_buffer",
    "gather",
    "scatter",
    "release_gather",
    "stream",
    "PinInfo",
    "StreamReport",
    "PinnedMemory",
    "PinstreamError",
    "PinError",
    "NotPinnableError",
    "AlreadyRegisteredError",
    "NotRegisteredError",
    "OpenCLError",
]

ShapeLike = Union[int, Sequence[int]]

# Larger than any address space: a request past it is a mistake in the shape.
_MAX_BYTES = 1 << 62


def _is_pyopencl(obj: Any, name: str) -> bool:
    return any(
        c.__name__ == name and (c.__module__ or "").startswith("pyopencl")
        for c in type(obj).__mro__
    )


_loader_chosen = False


def _prefer_pyopencl_loader() -> None:
    """Before the native library first loads OpenCL, points it at the ICD loader PyOpenCL's
    wheel bundles (``pyopencl/.libs/libOpenCL-*.so``), unless ``OPENCL_DYLIB_PATH`` is set.

    Either loader works with the other's handles (an OpenCL object carries its driver's
    dispatch table, and both loaders read /etc/OpenCL/vendors, so the driver is loaded once);
    sharing PyOpenCL's means one loader in the process, and pinstream also works where no
    system ``libOpenCL.so.1`` is installed. The system loader stays the fallback.
    """
    global _loader_chosen
    if _loader_chosen:
        return
    _loader_chosen = True
    cl = sys.modules.get("pyopencl")
    if "OPENCL_DYLIB_PATH" in os.environ or cl is None or not getattr(cl, "__file__", None):
        return
    here = os.path.dirname(cl.__file__)
    bundled = sorted(
        glob.glob(os.path.join(here, ".libs", "libOpenCL*.so*"))
        + glob.glob(os.path.join(here, os.pardir, "pyopencl.libs", "libOpenCL*.so*"))
    )
    if bundled:
        os.environ["OPENCL_DYLIB_PATH"] = os.path.realpath(bundled[0])


def _context_handle(ctx: Any) -> int:
    """The ``cl_context`` handle of ``ctx`` as an integer."""
    if type(ctx).__module__.startswith("pyopencl"):
        if not _is_pyopencl(ctx, "Context"):
            raise TypeError(
                f"expected a pyopencl.Context, got a {type(ctx).__name__}: "
                "pass its context (queue.context, buffer.context)"
            )
        _prefer_pyopencl_loader()
    handle = getattr(ctx, "int_ptr", None)
    if handle is None:
        raise TypeError(
            f"expected a pyopencl.Context or an object whose int_ptr is a cl_context handle, "
            f"got {type(ctx).__name__}"
        )
    handle = operator.index(handle)
    if handle <= 0:
        raise ValueError(f"int_ptr is {handle}: not a cl_context handle")
    return handle


def _shape(shape: ShapeLike) -> Tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        dims = (operator.index(shape),)
    else:
        try:
            dims = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise TypeError(
                f"shape must be an int or a sequence of ints, got {shape!r}"
            ) from None
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimensions are not allowed: shape {dims}")
    return dims


def _dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)  # TypeError for names NumPy does not know
    if dt.hasobject:
        raise TypeError(
            f"dtype {dt} holds Python object references, which pinned memory cannot hold: "
            "use a numeric, boolean, string or structured dtype without objects"
        )
    return dt


def _alloc(ctx: Any, shape: ShapeLike, dtype: Any, zero: bool, strategy: str,
           measure_vram: bool, mapped: bool) -> np.ndarray:
    dt, dims = _dtype(dtype), _shape(shape)
    count = math.prod(dims)
    nbytes = count * dt.itemsize
    if nbytes > _MAX_BYTES:
        raise ValueError(f"shape {dims} of {dt} is {nbytes} bytes: too large for any machine")
    memory = _native.alloc(
        _context_handle(ctx), nbytes, strategy=strategy, zero=zero, measure_vram=measure_vram,
        mapped=mapped,
    )
    if memory is None:  # zero bytes: nothing to pin
        return np.empty(dims, dtype=dt)
    return np.frombuffer(memory, dtype=dt, count=count).reshape(dims)


def empty(ctx: Any, shape: ShapeLike, dtype: Any = float, *, strategy: str = "auto",
          measure_vram: bool = True, mapped: bool = False) -> np.ndarray:
    """A new C-contiguous array in pinned host memory of ``ctx``, not initialised.

    ``strategy`` forces one of the library's strategies (``register``, ``nv-host``, ...);
    ``auto`` picks the fastest that pins with no VRAM cost. ``measure_vram`` reads the
    device's memory counter around the pinning (``info(a).vram_cost``).

    Memory that cannot be pinned raises :class:`PinError` (with each strategy's reason): the
    baselines that pin nothing (``pageable``, and ``mlock``, which only locks pages) are used
    when asked for by name.

    Shapes are NumPy's: ``()`` is a 0-d array of one item. A shape of zero items (``0``,
    ``(3, 0)``) has nothing to pin: the arguments are checked as for any size, and the result
    is an ordinary empty NumPy array (``info`` of it says ``strategy='none'``, nothing pinned).

    ``mapped=True`` makes mapped memory (``cudaHostAllocMapped``): kernels read and write it in
    place, through the buffer :func:`device_buffer` gives. Its mechanism is chosen per driver
    (NVIDIA: ``clCreateBufferNV`` host memory; CPU devices and AMD: ``CL_MEM_ALLOC_HOST_PTR``;
    Intel integrated GPUs: ``CL_MEM_USE_HOST_PTR``), so it takes no ``strategy``; a driver
    with none raises :class:`PinError`, and so does a size above the device's largest buffer.
    """
    return _alloc(ctx, shape, dtype, False, strategy, measure_vram, mapped)


def zeros(ctx: Any, shape: ShapeLike, dtype: Any = float, *, strategy: str = "auto",
          measure_vram: bool = True, mapped: bool = False) -> np.ndarray:
    """As :func:`empty`, filled with zeros."""
    return _alloc(ctx, shape, dtype, True, strategy, measure_vram, mapped)


def device_buffer(array: Any) -> Tuple[Any, int]:
    """The ``pyopencl.Buffer`` over the mapped memory holding ``array`` (from
    ``empty``/``zeros`` with ``mapped=True``), which kernels read and write in place, and the
    offset in bytes of the array's first element in it (``cudaHostGetDevicePointer``; a view
    into the memory gives the same buffer and its own offset). Pass the offset to the kernel
    beside the buffer.

    The buffer keeps the memory the kernels see alive while it is held, after the arrays are
    collected too. The host's writes are seen by kernels enqueued after them; a kernel's
    writes are seen by the array once the kernel's event is complete.

    Memory that is not mapped raises ``ValueError`` (a registered buffer given to a kernel is
    copied into VRAM on discrete GPUs); memory pinstream does not pin raises
    :class:`NotRegisteredError`.
    """
    import pyopencl as cl  # before the native call: its reference goes straight to a Buffer

    handle, offset = _native.device_buffer(array)
    return cl.Buffer.from_int_ptr(handle, retain=False), offset


def _handle(op: str, obj: Any, kind: str, name: str) -> int:
    """The OpenCL handle (``int_ptr``) of the pyopencl ``kind`` object ``obj``, passed to
    ``op`` as ``name``."""
    if not _is_pyopencl(obj, kind):
        raise TypeError(f"{op}: {name} must be a pyopencl.{kind}, got a {type(obj).__name__}")
    return operator.index(obj.int_ptr)


# The largest offset or size a piece takes: the native calls read them as ``uint64``.
_U64_MAX = (1 << 64) - 1


def _column(op: str, name: str, values: Any) -> np.ndarray:
    """``values`` (``name`` of ``op``) as ``uint64``, every value taken exactly: integers of any
    dtype, or Python ints; negative values, values past 2**64 - 1, floats and booleans refused.
    (Never through ``float64``, where an offset near 2**64 rounds and wraps into a valid one.)"""
    column = np.asarray(values)
    if column.ndim != 1:
        raise TypeError(f"{op}: {name} must be a 1-D sequence of integers (bytes)")
    if column.size == 0:
        return column.astype(np.uint64)
    kind = column.dtype.kind
    if kind == "O":  # Python ints that fit no NumPy integer, or objects that are not ints
        try:
            ints = [operator.index(v) for v in column]
        except TypeError:
            raise TypeError(f"{op}: {name} must be a 1-D sequence of integers (bytes)") from None
        bad = next((i for i, v in enumerate(ints) if not 0 <= v <= _U64_MAX), None)
        if bad is not None:
            v = ints[bad]
            if v < 0:
                raise ValueError(f"{op}: {name}[{bad}] is {v}, a negative value: "
                                 "give byte offsets and sizes >= 0")
            raise ValueError(f"{op}: {name}[{bad}] is {v}, past 2**64 - 1, which no array "
                             "reaches: give offsets and sizes inside the array and the buffer")
        return np.array(ints, dtype=np.uint64)
    if kind not in "iu":
        raise TypeError(f"{op}: {name} must be a 1-D sequence of integers (bytes), "
                        f"not {column.dtype}")
    if kind == "i" and column.min() < 0:
        bad = int(np.argmax(column < 0))
        raise ValueError(f"{op}: {name}[{bad}] is {column[bad]}, a negative value: "
                         "give byte offsets and sizes >= 0")
    return column.astype(np.uint64)  # exact: non-negative integers of at most 64 bits


def _pieces(op: str, src_offsets: Any, sizes: Any, dst_offsets: Any, host_side: str) -> bytes:
    """The pieces as the native calls take them: ``uint64`` triples (offset in the array,
    size, offset in the buffer), the array being the ``host_side`` ("src" or "dst")."""
    names = ("src_offsets", "sizes", "dst_offsets")
    cols = [_column(op, name, values)
            for values, name in zip((src_offsets, sizes, dst_offsets), names)]
    if not len(cols[0]) == len(cols[1]) == len(cols[2]):
        raise ValueError(f"{op}: src_offsets, sizes and dst_offsets differ in length: "
                         "give one of each per piece")
    if host_side == "dst":
        cols.reverse()
    return np.stack(cols, axis=1).tobytes()


def gather(queue: Any, dst: Any, src: Any, src_offsets: Any, sizes: Any, dst_offsets: Any, *,
           disjoint: bool = False) -> Any:
    """Copies pieces of the mapped array ``src`` into the ``pyopencl.Buffer`` ``dst`` with one
    kernel that reads them in place across the bus (``cudaMemcpyBatchAsync`` with the pieces
    in ``cudaHostAllocMapped`` memory): piece ``i`` is ``sizes[i]`` bytes from byte
    ``src_offsets[i]`` of ``src`` to byte ``dst_offsets[i]`` of ``dst``, on the in-order
    ``queue`` after the commands already on it. Returns the kernel's ``pyopencl.Event``; leave
    the pieces unchanged until it completes. The call never waits for ``queue``.

    Pieces that overlap in ``dst`` are refused (``ValueError``: which one lands last would be
    undefined), which costs a pass over the offsets, and buckets of them when they are not in
    order. ``disjoint=True`` vouches that they do not overlap, as ``cudaMemcpyBatchAsync``
    assumes, and skips that check. Every range is still checked against ``src`` and ``dst``
    (``ValueError``), so nothing outside them is read or written; if vouched pieces do
    overlap, which piece's bytes the overlap holds is unspecified.

    Offsets and sizes are integers of any NumPy dtype, or Python ints, taken exactly:
    negative values and values past 2**64 - 1 raise ``ValueError``, floats and booleans
    ``TypeError``. The kernel writes ``dst``: one made with ``cl.mem_flags.READ_ONLY`` raises
    ``ValueError``.

    ``src`` must be mapped (``empty``/``zeros`` with ``mapped=True``) in ``queue``'s context,
    else ``ValueError`` (:class:`NotRegisteredError` for memory pinstream does not pin). The
    copy kernel is built once per context and kept, with a reference to the context, until
    :func:`release_gather`. The arrays may be collected while the kernel waits: their memory
    is freed once it has run, and collecting them never waits for it.
    """
    import pyopencl as cl  # the returned event's class

    q, d = _handle("gather", queue, "CommandQueue", "queue"), _handle("gather", dst, "Buffer", "dst")
    pieces = _pieces("gather", src_offsets, sizes, dst_offsets, "src")
    handle = _native.gather(q, d, src, pieces, bool(disjoint))
    return cl.Event.from_int_ptr(handle, retain=False)


def scatter(queue: Any, dst: Any, src: Any, src_offsets: Any, sizes: Any, dst_offsets: Any, *,
            disjoint: bool = False) -> Any:
    """The other way from :func:`gather`: piece ``i`` is ``sizes[i]`` bytes from byte
    ``src_offsets[i]`` of the ``pyopencl.Buffer`` ``src`` to byte ``dst_offsets[i]`` of the
    writable mapped array ``dst``, written in place by one kernel across the bus. Returns the
    kernel's ``pyopencl.Event``: read the pieces in ``dst`` once it completes (``evt.wait()``;
    nothing else waits for it). The call never waits for ``queue``.

    Pieces that overlap in ``dst`` are refused (``ValueError``) unless ``disjoint=True``
    vouches that they do not; ranges past ``src`` or ``dst`` are refused either way, and
    vouched pieces that do overlap leave the overlap's bytes unspecified. Offsets and sizes
    are taken as :func:`gather` takes them. The kernel reads ``src``: one made with
    ``cl.mem_flags.WRITE_ONLY`` raises ``ValueError``. ``dst`` may be collected while the
    kernel waits: its memory is freed once the kernel has run, and collecting it never waits
    for it.
    """
    import pyopencl as cl  # the returned event's class

    q, s = _handle("scatter", queue, "CommandQueue", "queue"), _handle("scatter", src, "Buffer", "src")
    pieces = _pieces("scatter", src_offsets, sizes, dst_offsets, "dst")
    handle = _native.scatter(q, s, dst, pieces, bool(disjoint))
    return cl.Event.from_int_ptr(handle, retain=False)


def release_gather(ctx: Any) -> None:
    """Drops the copy kernels :func:`gather` and :func:`scatter` keep for ``ctx`` and their
    reference to the context; the next call there builds them again."""
    _native.release_gather(_context_handle(ctx))


def register(ctx: Any, array: Any, *, measure_vram: bool = True) -> Any:
    """Pins ``array`` (writable, C-contiguous) in place in ``ctx``; returns it.

    Any object with the buffer protocol: NumPy arrays of any shape (0-d too), ``bytearray``,
    ``ctypes`` arrays. An array of zero bytes has nothing to pin: it is checked, and left as is
    (``unregister`` of it does nothing).

    The array is kept alive (and cannot be resized) until :func:`unregister`. Memory the
    driver would accept without pinning (read-only, a shared mapping of a disk file such as
    ``numpy.memmap(mode='r+')``) raises :class:`NotPinnableError`.
    """
    _native.register(_context_handle(ctx), array, measure_vram=measure_vram)
    return array


def unregister(array: Any) -> None:
    """Unpins an array :func:`register` pinned (the array given, or a view starting at its
    first element). Copies from or to it must be complete first, as for ``cudaHostUnregister``.
    """
    _native.unregister(array)


@dataclass(frozen=True)
class PinInfo:
    """What pinstream knows about the memory of an array."""

    strategy: str
    """The strategy that pinned it (``register`` for registered arrays)."""
    reason: str
    """Why that strategy."""
    pinned: bool
    """True only where the driver pinned it for DMA by a measured or documented mechanism."""
    pin_state: str
    """``pinned``, ``not-pinned``, ``unknown`` or ``not-needed`` (CPU devices, and arrays of zero bytes)."""
    basis: str
    """The measurement or driver source behind ``pin_state``."""
    vram_cost: Optional[int]
    """Device memory the pinning took, in bytes, where measured."""
    vram_note: str
    """How ``vram_cost`` was measured, or why it was not."""
    owns_memory: bool
    """True for memory pinstream allocated (empty/zeros)."""
    registered: bool
    """True for an array pinned by :func:`register`."""
    range: Tuple[int, int]
    """Addresses of the whole pinned range holding the array."""
    array_range: Tuple[int, int]
    """Addresses of the array's own bytes."""
    nbytes: int
    """Bytes of the pinned range."""
    chunks: list
    """Byte ranges (offsets in the pinned range) of each driver allocation or registration."""
    pin_time: float
    """Seconds it took to pin."""
    mapped: bool
    """True for mapped memory (``empty(..., mapped=True)``), which kernels use in place."""
    zero_copy: Optional[str]
    """For mapped memory, how its buffer stays in host memory (``nv-host``, ``cpu-heap``,
    ``amd-alloc-host-ptr``, ``intel-use-host-ptr``); else None."""

    def __str__(self) -> str:
        vram = self.vram_note if self.vram_cost is None else f"{self.vram_cost} bytes"
        return (
            f"{self.nbytes} bytes at {self.range[0]:#x}, strategy {self.strategy}, "
            f"{self.pin_state} ({self.basis}), VRAM cost {vram}, {len(self.chunks)} chunk(s), "
            f"pinned in {self.pin_time:.3f} s"
        )


def info(array: Any) -> PinInfo:
    """What pinstream knows about ``array``'s memory; :class:`NotRegisteredError` if it is
    not memory pinstream pins."""
    return PinInfo(**_native.info(array))


# Last: the module reads this one's helpers.
from ._stream import StreamReport, stream  # noqa: E402
