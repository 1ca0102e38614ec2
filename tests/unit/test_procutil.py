"""Children started with `die_with_parent()` do not outlive a build killed with SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

PARENT = """
import subprocess, sys, time
from edgekit._util.procutil import die_with_parent
tied = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=die_with_parent())
free = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(tied.pid, free.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_tied_child_dies_with_its_killed_parent_and_an_untied_one_does_not() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    tied, free = map(int, parent.stdout.readline().split())  # type: ignore[union-attr]
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.time() + 5
        while psutil.pid_exists(tied) and psutil.Process(tied).status() != psutil.STATUS_ZOMBIE:
            assert time.time() < deadline, "the tied child outlived its parent"
            time.sleep(0.05)
        assert psutil.pid_exists(free) and psutil.Process(free).status() != psutil.STATUS_ZOMBIE
    finally:
        for pid in (tied, free):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
