"""``pinstream.stream``: the streaming engine over pinned arrays with the caller's PyOpenCL
kernel, and its :class:`StreamReport`. Imported into ``pinstream``; the checks of the call's
arguments are here, the run in the native module (crates/pinstream-py/src/stream.rs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Optional, Tuple, Union

import numpy as np

from . import _native

# The element types the engine streams, by NumPy dtype (native byte order).
_STREAM_DTYPES = {
    np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.float64): "f64",
    np.dtype(np.int8): "i8", np.dtype(np.uint8): "u8", np.dtype(np.int16): "i16",
    np.dtype(np.uint16): "u16", np.dtype(np.int32): "i32", np.dtype(np.uint32): "u32",
    np.dtype(np.int64): "i64", np.dtype(np.uint64): "u64",
}


@dataclass(frozen=True, repr=False)
class StreamReport:
    """What :func:`stream` did: bytes, the busy time of each stage, bandwidth and overlap."""

    device: str
    """The device the run streamed on."""
    mode: str
    """``three queues`` (uploads, kernels and downloads overlapped)."""
    bytes: int
    """Bytes moved between host and device, both ways, every pass."""
    bytes_up: int
    """Bytes uploaded (host to device)."""
    bytes_down: int
    """Bytes downloaded (device to host)."""
    wall_s: float
    """Seconds on the host, from the first command enqueued to the last completed."""
    device_wall_s: float
    """Seconds by the device clock, from the first command's start to the last one's end."""
    upload_s: float
    """Seconds the uploads were busy, summed."""
    kernel_s: float
    """Seconds the kernels were busy, summed."""
    download_s: float
    """Seconds the downloads were busy, summed."""
    gbps: float
    """Bytes moved both ways over ``device_wall_s``, GB/s (10**9 bytes a second)."""
    upload_gbps: float
    """Bytes uploaded over ``device_wall_s``, GB/s."""
    download_gbps: float
    """Bytes downloaded over ``device_wall_s``, GB/s."""
    overlap: float
    """The busiest stage's time over the wall time: 1.0 runs as fast as the slowest stage allows."""
    blocks: int
    """Blocks in one pass."""
    block_bytes: int
    """Input bytes per block (per input)."""
    slots: int
    """Slots in the ring of device buffers."""
    passes: int
    """Passes over the blocks."""
    resident_bytes: int
    """Bytes of the ``resident=`` arrays, uploaded once."""
    resident_blocks: int
    """Blocks that stayed in device memory across passes (uploaded and downloaded once)."""
    residency: str
    """Why that many blocks stayed resident, in words."""
    pool_bytes: int
    """Device memory the run allocated."""
    vram_budget: int
    """The VRAM budget it ran in."""
    bounds_guard: bool
    """True where every device buffer had a guard zone, checked after each kernel (CPU devices)."""

    def as_dict(self) -> Dict[str, Any]:
        """The report's fields as a dict (for JSON)."""
        return asdict(self)

    def __repr__(self) -> str:
        return (
            f"StreamReport({self.bytes} bytes in {self.blocks} block(s) x {self.passes} pass(es) "
            f"on {self.device!r}: {self.gbps:.2f} GB/s, overlap {self.overlap:.2f}, "
            f"busy upload {self.upload_s:.3f} s / kernel {self.kernel_s:.3f} s / "
            f"download {self.download_s:.3f} s, {self.slots} slot(s) of {self.block_bytes} "
            f"bytes, resident {self.resident_bytes} bytes + {self.resident_blocks} block(s), "
            f"budget {self.vram_budget} bytes)"
        )


def _stream_array(name: str, array: Any) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"stream: {name} must be a NumPy array pinned by pinstream.empty or "
                        f"pinstream.register, got a {type(array).__name__}")
    return array


def _stream_dtype(name: str, array: np.ndarray) -> str:
    dt = array.dtype
    code = _STREAM_DTYPES.get(dt) if dt.isnative else None
    if code is None:
        raise TypeError(f"stream: {name} has dtype {dt}, which no kernel streams: pass an array "
                        "of a native-endian float16/32/64 or (u)int8/16/32/64 dtype")
    return code


def _stream_size(name: str, value: Any) -> Optional[str]:
    """``budget``/``block``: None, bytes as an int, or a size such as ``'4GiB'``."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"stream: {name} must be bytes as an int or a size such as '4GiB', "
                        f"got {value!r}")
    if value <= 0:
        raise ValueError(f"stream: {name}={value}: give a positive number of bytes")
    return str(int(value))


def _stream_residency(value: Any) -> str:
    """``residency``: ``'auto'`` (``None`` too), ``'off'`` (``0`` too, as C's
    ``PS_RESIDENCY_OFF``), or at most that many bytes (an int above 0, or a size)."""
    accepted = "'auto' (or None), 'off' (or 0), or bytes as an int or a size such as '1GiB'"
    if value is None:
        return "auto"
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"stream: residency must be {accepted}, got {value!r}")
    if value < 0:
        raise ValueError(f"stream: residency={value}: pass {accepted}")
    return "off" if value == 0 else str(int(value))


def _stream_scalar(name: str, value: Any) -> str:
    """A scalar of ``args=`` as the text the kernel's type reads, exactly."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"stream: args['{name}'] is a bool: pass 0 or 1")
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        return value
    raise TypeError(f"stream: args['{name}'] must be a number, got {type(value).__name__}")


def _stream_sources(inout: Any, input: Any, output: Any) -> Tuple[Any, list, Any]:
    if inout is not None and (input is not None or output is not None):
        raise ValueError("stream: pass inout= to stream an array in place, or input= and "
                         "output= to stream into another array, not both")
    if inout is None and (input is None or output is None):
        raise ValueError("stream: pass inout=ARRAY to stream an array in place, or "
                         "input=ARRAY (or a list of arrays) and output=ARRAY")
    if inout is not None:
        return _stream_array("inout", inout), [], None
    inputs = list(input) if isinstance(input, (list, tuple)) else [input]
    if not inputs:
        raise ValueError("stream: input= is an empty list: pass at least one array")
    inputs = [_stream_array(f"input[{i}]", a) for i, a in enumerate(inputs)]
    return None, inputs, _stream_array("output", output)


def stream(queue: Any, kernel: Any, *, inout: Any = None, input: Any = None,
           output: Any = None, resident: Optional[Dict[str, Any]] = None,
           args: Optional[Dict[str, Any]] = None, reduce: int = 1,
           budget: Union[None, int, str] = None, block: Union[None, int, str] = None,
           passes: int = 1, residency: Union[None, str, int] = "auto",
           progress: Optional[Callable[[int, int], Any]] = None) -> StreamReport:
    """Streams pinned arrays through the PyOpenCL ``kernel``, block by block, on the device of
    ``queue``, inside a VRAM budget, with uploads, kernels and downloads overlapped (pinstream's
    engine, as the command line's ``run``). Returns a :class:`StreamReport`. Synchronous: the
    arrays hold the results when it returns.

    * ``inout=a``: ``a`` in place. ``input=a, output=b``: ``a`` (or a list of arrays of one
      length and dtype) into ``b``; with ``reduce=k``, every ``k`` input elements give one
      output element.
    * ``resident={name: array}``: arrays uploaded once and bound to the kernel's buffer
      arguments of those names.
    * ``args={name: value}``: the kernel's scalar arguments after the counts, by name.
    * ``budget=``: device memory the run may use (bytes, or ``'4GiB'``; default: half the free
      VRAM). ``block=``: input bytes per block (default: as ``run`` picks it).
      ``passes=n``: in place, pass ``k + 1`` reads what pass ``k`` wrote. ``residency=``:
      blocks kept in VRAM across passes: ``'auto'`` (the default; ``None`` too) as many as the
      budget leaves room for, ``'off'`` (``0`` too, as C's ``PS_RESIDENCY_OFF``) none, or at
      most that many bytes (an int above 0, or a size such as ``'1GiB'``).
    * ``progress=f``: ``f(blocks_done, bytes_done)`` is called on this thread, with the GIL, as
      blocks come back (a block of every pass counts).

    The kernel takes the command line's arguments (docs/cli.md): one ``__global`` pointer per
    input (the in-place array), the output's, the residents' in the kernel's order, then the
    block's element count (``uint``/``int``/``ulong``/``long``; optionally the block index and
    the element offset), then ``args=``. Its element types must be the arrays' dtypes. It
    must write nothing when the count is 0. pinstream binds its own kernel object of the same
    function, so the arguments set on ``kernel`` are left as they are.

    Every array must be pinned by pinstream (``pinstream.empty``/``zeros``, or
    ``pinstream.register``): others raise :class:`NotRegisteredError`. Leave the arrays alone
    during the call: work already queued on them (a non-blocking ``enqueue_copy``) must be
    complete first, since ``stream`` never waits for, finishes or enqueues on ``queue``, whose
    device alone it takes (the run uses queues of its own there).

    Ctrl-C (``KeyboardInterrupt``), or an exception raised by ``progress``, stops the run after
    the blocks in flight, releases every device buffer, and is raised. The arrays stay valid;
    in place, their data is then part done.
    """
    from . import _handle, _prefer_pyopencl_loader  # defined before pinstream imports this

    q = _handle("stream", queue, "CommandQueue", "queue")
    k = _handle("stream", kernel, "Kernel", "kernel")
    _prefer_pyopencl_loader()
    inout, inputs, output = _stream_sources(inout, input, output)
    sources = [inout] if inout is not None else inputs
    dtypes = {_stream_dtype("inout" if inout is not None else f"input[{i}]", a)
              for i, a in enumerate(sources)}
    if len(dtypes) > 1:
        raise TypeError(f"stream: the inputs have dtypes {sorted(dtypes)}: pass arrays of one dtype")
    dtype = dtypes.pop()
    residents = []
    for name, a in (resident or {}).items():
        residents.append((str(name), _stream_array(f"resident['{name}']", a)))
    for what, n in (("reduce", reduce), ("passes", passes)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"stream: {what}={n!r}: give an int of at least 1")
    if progress is not None and not callable(progress):
        raise TypeError("stream: progress must be callable as progress(blocks_done, bytes_done)")
    spec = {
        "inout": inout,
        "inputs": inputs,
        "output": output,
        "residents": residents,
        "args": [(str(n), _stream_scalar(str(n), v)) for n, v in (args or {}).items()],
        "dtype": dtype,
        "out_dtype": _stream_dtype("output", output) if output is not None else dtype,
        "budget": _stream_size("budget", budget),
        "block": _stream_size("block", block),
        "residency": _stream_residency(residency),
        "passes": int(passes),
        "reduce": int(reduce),
    }
    return StreamReport(**_native.stream(q, k, spec, progress))
