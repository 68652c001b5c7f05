"""The Python examples run as users run them, at a small size, and check their own results."""

import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir)


def test_stream_larger_than_vram_checks_its_result():
    script = os.path.join(ROOT, "examples", "python", "stream_larger_than_vram.py")
    args = ["--total", "16MiB", "--block", "1MiB", "--budget", "8MiB", "--repeat", "2",
            "--passes", "2", "--json"]
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "check: all 4194304 elements right after 4 application(s)" in done.stdout, done.stdout
    assert "GB/s" in done.stdout and "StreamReport(" in done.stdout
