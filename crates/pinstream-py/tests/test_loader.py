"""Which OpenCL loader the library uses beside PyOpenCL's, checked in fresh processes."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np, pyopencl as cl, pinstream
    dev = [d for p in cl.get_platforms() for d in p.get_devices()][0]
    ctx = cl.Context([dev]); q = cl.CommandQueue(ctx)
    a = pinstream.zeros(ctx, 1 << 16, np.float32); a[:] = 4
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, a.nbytes)
    cl.enqueue_copy(q, buf, a, is_blocking=False).wait()
    b = pinstream.empty(ctx, a.shape, np.float32)
    cl.enqueue_copy(q, b, buf)
    assert (b == 4).all()
    loaders = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libOpenCL" in l})
    print("\\n".join(loaders))
""")


def run(env_extra):
    env = {k: v for k, v in os.environ.items() if k != "OPENCL_DYLIB_PATH"}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_pyopencl_loader_is_shared_by_default():
    loaders = run({})
    assert len(loaders) == 1 and "pyopencl" in loaders[0], loaders


def test_a_context_from_pyopencls_loader_works_through_the_system_loader():
    """OPENCL_DYLIB_PATH chosen by the user is kept: here the system's libOpenCL.so.1 runs
    beside PyOpenCL's bundled loader, and handles made by one work through the other."""
    loaders = run({"OPENCL_DYLIB_PATH": "libOpenCL.so.1"})
    assert len(loaders) == 2, loaders
