"""The fleet report: every artifact of several bundles × every box it was benchmarked on, in one table.

`edgekit build a.toml b.toml` writes it beside the bundles (fleet-report.json, .md, .html). Each row
is one artifact on one box: its verdict, size, decode speed, time to first token and peak RSS, read
from the bundles' own report.json (bench figures from `benches`, or `bench` as box "local").
"""

from __future__ import annotations

import time
from typing import Any

from edgekit.report.plots import bench_artifacts

FLEET_SCHEMA = 1
FIGURES = ("decode_tok_s", "ttft_ms", "peak_rss_mib")
BUILD_MACHINE = "local"


def _median(value: Any) -> float | None:
    if isinstance(value, dict):
        value = value.get("median")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _benches(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    benches = dict(report.get("benches") or {})
    if report.get("bench"):
        benches.setdefault(BUILD_MACHINE, report["bench"])
    return benches


def _rows(bundle: str, report: dict[str, Any]) -> list[dict[str, Any]]:
    benches = _benches(report)
    rows = []
    for artifact in report.get("artifacts") or []:
        boxes: list[str | None] = [*sorted(benches)] or [None]
        for box in boxes:
            per = ((benches.get(box) or {}).get("artifacts") or {}) if box else {}
            measured = bench_artifacts(benches[box]).get(artifact["name"], {}) if box else {}
            skipped = (per.get(artifact["name"]) or {}).get("skipped") if box else None
            rows.append({
                "bundle": bundle,
                "artifact": artifact["name"],
                "backend": artifact.get("backend"),
                "scheme": artifact.get("scheme"),
                "box": box,
                "verdict": artifact.get("verdict"),
                "excluded": bool(artifact.get("excluded")),
                "size": artifact.get("size"),
                **{k: _median(measured.get(k)) for k in FIGURES},
                "not_measured": skipped or (None if measured or not box else "not benchmarked"),
            })  # fmt: skip
    return rows


def build_fleet_report(bundles: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """From (bundle path, its report.json) pairs: one row per artifact × box."""
    rows = [row for path, report in bundles for row in _rows(str(report.get("bundle") or path), report)]
    return {
        "schema_version": FLEET_SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "bundles": [{"name": report.get("bundle"), "path": path} for path, report in bundles],
        "boxes": sorted({r["box"] for r in rows if r["box"]}),
        "rows": rows,
    }
