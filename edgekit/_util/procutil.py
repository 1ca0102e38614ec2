"""Child processes that do not outlive the build that started them."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get SIGKILL when this process dies (Linux; None elsewhere).

    Without it, a build killed while the converter runs leaves the converter writing into a temp
    folder nobody will use, for minutes, on a box whose cores are already short.
    """
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def preexec() -> None:  # in the child, between fork and exec: keep it to two system calls
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec
