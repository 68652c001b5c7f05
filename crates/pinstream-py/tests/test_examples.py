"""The Python examples run as users run them, at a small size, and check their own results."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir)


@pytest.mark.parametrize("residency", [None, "off", "2MiB"])
def test_stream_larger_than_vram_checks_its_result(residency):
    script = os.path.join(ROOT, "examples", "python", "stream_larger_than_vram.py")
    args = ["--total", "16MiB", "--block", "1MiB", "--budget", "12MiB", "--repeat", "2",
            "--passes", "2", "--json"] + (["--residency", residency] if residency else [])
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "check: all 4194304 elements right after 4 application(s)" in done.stdout, done.stdout
    assert "GB/s" in done.stdout and "StreamReport(" in done.stdout
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(reports) == 2, done.stdout
    # auto (the default) keeps blocks in what the 12 MiB budget leaves beside the ring, 2MiB
    # one or two (one on PoCL, whose bounds guard doubles each block's buffer), off none.
    blocks = {None: lambda n: n > 0, "off": lambda n: n == 0, "2MiB": lambda n: 0 < n <= 2}
    assert all(blocks[residency](r["resident_blocks"]) for r in reports), reports


def test_stream_larger_than_vram_names_a_wrong_residency():
    script = os.path.join(ROOT, "examples", "python", "stream_larger_than_vram.py")
    done = subprocess.run([sys.executable, script, "--residency", "most"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "'most' is not auto, off or a size" in done.stderr, done.stderr
