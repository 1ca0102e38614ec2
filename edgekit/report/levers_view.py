"""The report's display model of the levers: ladders, with/without importance matrix, per-layer sensitivity.

Reads only the report dict (report["ladders"], ["comparisons"], ["sensitivity"]); the templates lay it out.
"""

from __future__ import annotations

from typing import Any

from edgekit.report.text import anchor, fmt, metric_cell, mib

TOP_LAYERS = 8


def _ladder(ladder: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for c in ladder["candidates"]:
        metrics = c.get("metrics") or {}
        rows.append({
            "label": c["label"],
            "verdict": c["verdict"],
            "kept": c["kept"],
            "size": mib(c.get("size")),
            "bits_per_weight": fmt(c.get("bits_per_weight")) if c.get("bits_per_weight") else "—",
            "kld_mean": metric_cell(metrics, "kld_mean"),
            "top1": metric_cell(metrics, "top1", "%"),
            "ppl_ratio": metric_cell(metrics, "ppl_ratio"),
            "decode": fmt(c["decode_tok_s"]) if c.get("decode_tok_s") else "—",
            "why": "; ".join(c.get("reasons") or []) or ("passes every gate" if c["verdict"] == "pass" else ""),
        })  # fmt: skip
    return {
        "target": ladder["target"],
        "anchor": "ladder-" + anchor(ladder["target"]),
        "objective": ladder["objective"],
        "passed": ladder["passed"],
        "kept": ladder["kept"],
        "reason": ladder["reason"],
        "rows": rows,
        "timed": any(c.get("decode_tok_s") for c in ladder["candidates"]),
        "timed_on": _timed_on(ladder),
    }


def _timed_on(ladder: dict[str, Any]) -> str:
    boxes = [c["measured_on"] for c in ladder["candidates"] if c.get("measured_on")]
    return f"on the box {boxes[0]}" if boxes else "on this build machine"


def _side(side: dict[str, Any]) -> dict[str, Any]:
    metrics = side.get("metrics") or {}
    return {
        "artifact": side["artifact"],
        "verdict": side["verdict"],
        "size": mib(side.get("size")),
        "kld_mean": metric_cell(metrics, "kld_mean"),
        "top1": metric_cell(metrics, "top1", "%"),
        "ppl_ratio": metric_cell(metrics, "ppl_ratio"),
    }


def _comparison(c: dict[str, Any]) -> dict[str, Any]:
    diff = c["difference"]
    details = c.get("lever_details") or {}
    return {
        "target": c["target"],
        "lever": c["lever"],
        "scheme": c["scheme"],
        "with": _side(c["with"]),
        "without": _side(c["without"]),
        "kld_diff": metric_cell(diff, "kld_mean"),
        "top1_diff": metric_cell(diff, "top1", "pp"),
        "source": _range_text(details.get("calibration") or {}),
        "chunks": details.get("chunks"),
        "chunk_tokens": details.get("chunk_tokens"),
    }


def _range_text(calibration: dict[str, Any]) -> str:
    if not calibration.get("token_range"):
        return ""
    start, end = calibration["token_range"]
    return f"{calibration.get('text', 'the calibration text')} (tokens {start:,}–{end:,}, none of them scored)"


def skipped_text(skipped: dict[str, Any] | None) -> str | None:
    if not skipped:
        return None
    return (
        f"measuring {skipped['groups']} layer groups would take about {skipped['projected_seconds']:.0f} s (one "
        f"took {skipped['probe_seconds']:.1f} s), over the budget of {skipped['budget_seconds']:g} s; raise "
        "sensitivity_budget_seconds or lower sensitivity_windows to measure it"
    )


def _sensitivity(s: dict[str, Any]) -> dict[str, Any]:
    groups = found if isinstance(found := s.get("groups"), list) else []
    return {
        "target": s["target"],
        "scheme": s["scheme"],
        "skipped": skipped_text(s.get("skipped")),
        "windows": s.get("windows"),
        "tokens": s.get("scored_tokens"),
        "base": fmt(s.get("base_kld_mean")),
        "whole": fmt(s.get("artifact_kld_mean")),
        "count": len(groups),
        "rows": [
            {
                "group": g["group"],
                "tensors": g["tensors"],
                "types": ", ".join(g["types"]),
                "kld": fmt(g["kld_mean"]),
                "added": fmt(g["added"]),
            }
            for g in groups[:TOP_LAYERS]
        ],
    }


def levers_view(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "ladders": [_ladder(x) for x in report.get("ladders") or []],
        "comparisons": [_comparison(x) for x in report.get("comparisons") or []],
        "sensitivity": [_sensitivity(x) for x in report.get("sensitivity") or []],
    }
