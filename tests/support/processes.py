"""Waiting on a process the test started (a build or an install paused at a seam) without hanging the suite."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], proc: subprocess.Popen[str], what: str, timeout: float = 900) -> None:
    """Poll `condition` until it holds; fail (killing `proc`) if `proc` ends first or `timeout` passes."""
    deadline = time.time() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the build ended (exit {proc.returncode}) before {what}:\n{proc.stderr.read()}")
        if time.time() > deadline:
            proc.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
