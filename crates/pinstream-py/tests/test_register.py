"""pinstream.register / unregister: the caller's arrays pinned in place (cudaHostRegister),
kept alive while registered, refused where the driver would not really pin them."""

import gc
import os
import threading
import weakref

import numpy as np
import pytest
from conftest import assert_speaks_python, census, round_trip

import pinstream


def test_register_round_trip_and_unregister(ctx, queue):
    a = np.arange(100_000, dtype=np.float64)
    assert pinstream.register(ctx, a) is a
    assert census()[2] == 1
    i = pinstream.info(a)
    assert i.registered and not i.owns_memory and i.strategy == "register"
    assert i.range == (a.ctypes.data, a.ctypes.data + a.nbytes)
    b = np.zeros_like(a)
    pinstream.register(ctx, b)
    assert round_trip(queue, a, b)
    pinstream.unregister(a)
    pinstream.unregister(b)
    assert census()[2] == 0
    with pytest.raises(pinstream.NotRegisteredError, match="not memory pinstream pins"):
        pinstream.info(a)


def test_registered_array_stays_alive_until_unregistered(ctx):
    a = np.ones(1000, dtype=np.int32)
    ref = weakref.ref(a)
    pinstream.register(ctx, a)
    del a
    gc.collect()
    assert ref() is not None, "a registered array was freed"
    pinstream.unregister(ref())
    gc.collect()
    assert ref() is None


def test_registered_array_cannot_be_resized(ctx):
    a = np.ones(1000, dtype=np.int32)
    pinstream.register(ctx, a)
    with pytest.raises(ValueError, match="referenced"):
        a.resize(10)  # refcheck=False would bypass this, as for any memory held elsewhere
    pinstream.unregister(a)


def test_twice_and_overlapping_are_refused(ctx):
    a = np.zeros(4096, dtype=np.uint8)
    pinstream.register(ctx, a)
    with pytest.raises(pinstream.AlreadyRegisteredError, match="registered with pinstream.register"):
        pinstream.register(ctx, a)
    with pytest.raises(pinstream.AlreadyRegisteredError, match="overlaps"):
        pinstream.register(ctx, a[100:200])
    pinstream.unregister(a)
    pinstream.register(ctx, a[100:200])  # free again once unregistered
    pinstream.unregister(a[100:200])


def test_unregister_unknown_twice_and_inside(ctx):
    a = np.zeros(4096, dtype=np.uint8)
    with pytest.raises(pinstream.NotRegisteredError, match="not memory pinstream pins"):
        pinstream.unregister(a)
    pinstream.register(ctx, a)
    with pytest.raises(pinstream.NotRegisteredError, match="starts inside"):
        pinstream.unregister(a[10:])
    pinstream.unregister(a[:10])  # a view from its first byte names the registration
    with pytest.raises(pinstream.NotRegisteredError):
        pinstream.unregister(a)


def test_info_needs_the_whole_array_inside(ctx):
    big = np.zeros(4096, dtype=np.uint8)
    pinstream.register(ctx, big[:1000])
    assert pinstream.info(big[500:1000]).registered
    with pytest.raises(pinstream.NotRegisteredError, match="wholly inside"):
        pinstream.info(big[500:1500])
    pinstream.unregister(big)


def test_other_buffer_objects_register_too(ctx):
    data = bytearray(8192)
    pinstream.register(ctx, data)
    assert pinstream.info(data).nbytes == 8192
    pinstream.unregister(data)


def test_non_contiguous_is_refused(ctx):
    a = np.zeros((100, 100), dtype=np.float32)
    with pytest.raises(ValueError, match="not C-contiguous"):
        pinstream.register(ctx, a[:, ::2])
    with pytest.raises(ValueError, match="not C-contiguous"):
        pinstream.register(ctx, np.asfortranarray(a))
    assert census()[2] == 0


def test_read_only_is_refused(ctx):
    a = np.zeros(1000)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        pinstream.register(ctx, a)
    assert census()[2] == 0


def test_read_only_bytes_object_is_refused(ctx):
    # bytes export read-only buffers over writable heap memory: a plain ValueError.
    with pytest.raises(ValueError, match="read-only"):
        pinstream.register(ctx, bytes(5000))


def test_not_a_buffer_is_refused(ctx):
    with pytest.raises(TypeError):
        pinstream.register(ctx, [1.0, 2.0])


def fs_type(path):
    mounts = [line.split() for line in open("/proc/mounts")]
    path = os.path.realpath(path)
    inside = [m for m in mounts if path == m[1] or path.startswith(m[1].rstrip("/") + "/")]
    return max(inside, key=lambda m: len(m[1]))[2]


def disk_dir(tmp_path):
    """A directory on a disk file system (tmpfs files pin: the refusal is for disk files)."""
    for d in [tmp_path, "/var/tmp", os.getcwd()]:
        if fs_type(d) != "tmpfs":
            return d
    pytest.fail("no directory on a disk file system to map a file from")


@pytest.fixture
def data_file(tmp_path):
    path = os.path.join(disk_dir(tmp_path), "data.bin")
    np.arange(1 << 16, dtype=np.float32).tofile(path)
    yield path
    os.unlink(path)


def test_read_only_memmap_gets_the_librarys_refusal(ctx, data_file):
    m = np.memmap(data_file, dtype=np.float32, mode="r")
    with pytest.raises(pinstream.NotPinnableError) as e:
        pinstream.register(ctx, m)
    assert "read-only mapping" in str(e.value) and "does not pin" in str(e.value)
    assert_speaks_python(str(e.value), "pinstream.empty(ctx, shape, dtype)")
    del m


def test_shared_writable_memmap_of_a_disk_file_is_refused(ctx, data_file):
    m = np.memmap(data_file, dtype=np.float32, mode="r+")
    with pytest.raises(pinstream.NotPinnableError, match="shared mapping of a disk file"):
        pinstream.register(ctx, m)
    assert census()[2] == 0
    # The range claimed for the failed registration was given up, not left "being registered".
    with pytest.raises(pinstream.NotRegisteredError, match="not memory pinstream pins"):
        pinstream.info(m)
    del m


def test_private_memmap_registers(ctx, queue, data_file):
    m = np.memmap(data_file, dtype=np.float32, mode="c")  # MAP_PRIVATE: copied on write
    pinstream.register(ctx, m)
    out = np.zeros(m.shape, np.float32)
    assert round_trip(queue, m, out)
    assert out[12345] == 12345
    pinstream.unregister(m)
    del m


def test_concurrent_overlapping_registrations_one_wins(ctx):
    a = np.zeros(1 << 22, dtype=np.uint8)
    results = []

    def go(view):
        try:
            pinstream.register(ctx, view)
            results.append("ok")
        except pinstream.AlreadyRegisteredError:
            results.append("refused")

    threads = [threading.Thread(target=go, args=(a[i * 1000:],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["ok"] + ["refused"] * 7
    for i in range(8):
        try:
            pinstream.unregister(a[i * 1000:])
        except pinstream.NotRegisteredError:
            pass
    assert census()[2] == 0
