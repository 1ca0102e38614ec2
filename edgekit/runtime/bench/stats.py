"""Summaries of repeated measurements: the median with its spread, never a single run."""

from __future__ import annotations

import statistics
from typing import Any


def summary(values: list[float], digits: int = 3) -> dict[str, Any]:
    """{median, min, max, n} of `values` (the median is the figure to quote)."""
    values = [float(v) for v in values]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "n": len(values),
    }


def median(stat: dict[str, Any] | None) -> float | None:
    return None if not stat else stat.get("median")


def ratio(numerator: float | None, denominator: float | None, digits: int = 3) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, digits)
