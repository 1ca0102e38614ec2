"""fleet-report.md and fleet-report.html from the fleet report model (edgekit.report.fleet), and the JSON itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit._util.fsutil import write_json_atomic, write_text_atomic
from edgekit.report.render import _environment
from edgekit.report.text import fmt, mib

FLEET_FILE = "fleet-report"


def fleet_view(fleet: dict[str, Any]) -> dict[str, Any]:
    rows = [
        {
            **row,
            "box": row["box"] or "—",
            "size": mib(row.get("size")),
            "decode": fmt(row.get("decode_tok_s")),
            "ttft": fmt(row.get("ttft_ms")),
            "rss": fmt(row.get("peak_rss_mib")),
            "note": ("left out of the bundle" if row.get("excluded") else "") or (row.get("not_measured") or ""),
        }
        for row in fleet["rows"]
    ]
    verdicts = [r["verdict"] for r in fleet["rows"] if r["box"] in (None, *fleet["boxes"][:1])]
    return {
        "created": fleet["created"],
        "bundles": fleet["bundles"],
        "boxes": fleet["boxes"],
        "rows": rows,
        "counts": {v: verdicts.count(v) for v in dict.fromkeys(verdicts)},
    }


def write_fleet_reports(directory: Path, fleet: dict[str, Any]) -> list[Path]:
    """fleet-report.json, .md and .html in `directory`; returns their paths."""
    env = _environment()
    data = fleet_view(fleet)
    paths = [directory / f"{FLEET_FILE}.{ext}" for ext in ("json", "md", "html")]
    write_json_atomic(paths[0], fleet)
    write_text_atomic(paths[1], env.get_template("fleet.md.j2").render(**data))
    write_text_atomic(paths[2], env.get_template("fleet.html.j2").render(**data))
    return paths
