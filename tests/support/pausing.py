"""What the paused scripts share (`paused_edgekit.py`, `paused_install.py`): stop at a seam, and run the CLI.

Those scripts run by path, so this module is imported from the same folder (sys.path[0]), not as a package.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def pause(flag: str) -> None:
    """Say where this process is (its pid in FLAG) and wait to be killed."""
    Path(flag).write_text(str(os.getpid()))
    time.sleep(600)


def run_edgekit(args: list[str]) -> None:
    sys.argv = ["edgekit", *args]
    from edgekit.cli import main as edgekit_main

    edgekit_main()
