"""Counting a child process's work for a progress step, from what it prints or from the file it writes.

`RunningCount` turns lines such as llama.cpp quantizer's `[  12/ 272] blk.0.attn_q.weight …` into the step's
done count (the tools' output itself stays in their log); `growth` counts the MiB a file has grown to while
a tool that prints nothing per item writes it (llama.cpp's converter writes its tensors after it has logged
them all).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from edgekit.observe.progress import Task

MIB = 2**20


class RunningCount:
    """Advances `shown` to the running count that `pattern`'s first group reads on a line (`[ 12/ 272]`)."""

    def __init__(self, shown: Task, pattern: re.Pattern[str]) -> None:
        self.shown, self.pattern = shown, pattern
        self.done = 0

    def __call__(self, line: str) -> None:
        found = self.pattern.search(line)
        if found is None:
            return
        now = int(found.group(1))
        if now > self.done:
            self.shown.advance(now - self.done)
            self.done = now


@contextlib.contextmanager
def growth(path: Path, shown: Task, total_mib: int, every_s: float = 0.5) -> Iterator[None]:
    """While the block runs, advance `shown` to the whole MiB `path` has grown to (never past `total_mib`)."""
    stop = threading.Event()

    def poll() -> None:
        done = 0
        while not stop.wait(every_s):
            with contextlib.suppress(OSError):  # not created yet
                now = min(path.stat().st_size // MIB, total_mib)
                if now > done:
                    shown.advance(now - done)
                    done = now

    thread = threading.Thread(target=poll, name="edgekit-growth", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
