"""The arithmetic of a progress line: how much is done, how long it took, how long the rest will take.

Pure functions of (done, total, elapsed): the plain reporter (`edgekit.observe.progress`) writes them, the
tests check them without a clock. The ETA assumes the rest goes at the average rate so far, which is what
the steps that report a total are like: windows, tensors and jobs of about the same cost each.
"""

from __future__ import annotations

import math

STEPS = 10  # a plain line each time another tenth of the total is done


def duration(seconds: float) -> str:
    """42s, 1m02s, 1h05m: short enough for a CI log line, exact enough to plan by."""
    whole = max(0, int(seconds + 0.5))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def remaining(done: float, total: float, elapsed: float) -> float | None:
    """Seconds left at the average rate so far; None before anything is done (no rate yet)."""
    if done <= 0 or total <= 0:
        return None
    return max(0.0, elapsed * (total - done) / done)


def step(done: float, total: float) -> int:
    """How many whole tenths of `total` are done (0–10)."""
    if total <= 0:
        return 0
    return max(0, min(STEPS, math.floor(STEPS * done / total + 1e-9)))


def _count(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def progress_line(description: str, done: float, total: float, unit: str, elapsed: float, *, final: bool) -> str:
    """`<description>  40% (4/10 windows)  elapsed 1m02s  ETA 1m33s`; the last line ends in `done` instead."""
    percent = max(0, min(100, math.floor(100 * done / total + 1e-9))) if total > 0 else 0
    counted = f"{_count(done)}/{_count(total)}" + (f" {unit}" if unit else "")
    text = f"{description}  {percent}% ({counted})  elapsed {duration(elapsed)}"
    if final:
        return f"{text}  done"
    left = remaining(done, total, elapsed)
    return text if left is None else f"{text}  ETA {duration(left)}"
