"""Formatting shared by the report's model and its renderers: figures, intervals, tensor-type mixes."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any, kind: str = "g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if kind == "%":
        return f"{100 * value:.2f}%"
    if kind == "pp":  # a difference of two proportions, in percentage points
        return f"{100 * value:+.1f} pp"
    return f"{value:.4g}"


def metric_cell(metrics: dict[str, Any], key: str, kind: str = "g") -> dict[str, str]:
    """A metric's estimate and its interval, as two strings ("—" and "" when it was not measured)."""
    est = metrics.get(key)
    return {"value": fmt(est.get("value"), kind), "ci": fmt_ci(est, kind)} if est else {"value": "—", "ci": ""}


def mib(size: int | float | None) -> str:
    return f"{size / 2**20:,.1f} MiB" if size else "—"


def anchor(name: str) -> str:
    """An HTML id from a name: every character but letters and digits becomes '-'."""
    return "".join(c if c.isalnum() else "-" for c in name)


def fmt_ci(estimate: dict[str, Any] | None, kind: str = "g") -> str:
    if not estimate:
        return ""
    low, high = (estimate.get("ci95") or [None, None])[:2]
    if low is None or high is None:
        return ""
    return f"[{fmt(low, kind)}, {fmt(high, kind)}]"


def sample_size(estimate: dict[str, Any] | None) -> str:
    if not estimate or estimate.get("n") is None:
        return "—"
    return f"{estimate['n']:,} {estimate.get('unit', 'tokens')}"


def type_params(entry: Any) -> int:
    """Parameters of one tensor_types entry: {tensors, params, bytes} (GGUF) or a bare count."""
    if isinstance(entry, dict):
        entry = entry.get("params", 0)
    return int(entry) if isinstance(entry, int | float) and not isinstance(entry, bool) else 0


def type_mix_text(tensor_types: dict[str, Any]) -> str:
    total = sum(type_params(v) for v in tensor_types.values()) or 1
    ranked = sorted(tensor_types.items(), key=lambda kv: -type_params(kv[1]))
    return ", ".join(f"{k} {type_params(v) / total:.0%}" for k, v in ranked if type_params(v) / total >= 0.005)
