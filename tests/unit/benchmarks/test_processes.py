"""The benchmarks' process helpers: the tree under a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from benchmarks import processes


def test_descendants_are_children_and_theirs() -> None:
    # A child that starts a grandchild and prints its pid: both sleep until killed.
    child = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(grandchild.pid, flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        assert {child.pid, grandchild} <= processes.descendants(os.getpid())
        assert processes.descendants(child.pid) == {grandchild}
    finally:
        os.kill(grandchild, signal.SIGKILL)
        child.kill()
        child.wait()
