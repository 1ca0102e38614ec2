"""report.md and report.html from report.json (jinja2 templates, matplotlib plots embedded), and report.json itself.

report.html is one self-contained file: CSS inline, plots as PNG data URIs, no scripts, no external
requests. report.md links the same PNGs under plots/ beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit._util.fsutil import write_json_atomic, write_text_atomic
from edgekit.report.text import fmt
from edgekit.report.view import PLOTS_DIR, view


def _environment() -> Any:
    import jinja2

    def md(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("edgekit.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "html.j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["md"] = md
    env.filters["fmt"] = fmt
    return env


def render(report: dict[str, Any], plots: dict[str, tuple[str, bytes]] | None = None) -> tuple[str, str]:
    """(markdown, html) for a report dict."""
    env = _environment()
    data = view(report, plots)
    return env.get_template("report.md.j2").render(**data), env.get_template("report.html.j2").render(**data)


def write_human_reports(directory: Path, report: dict[str, Any]) -> None:
    from edgekit.report.plots import render_all

    plots = render_all(report)
    for name, (_, png) in plots.items():
        path = directory / PLOTS_DIR / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
    markdown, html = render(report, plots)
    write_text_atomic(directory / "report.md", markdown)
    write_text_atomic(directory / "report.html", html)


def write_reports(directory: Path, report: dict[str, Any]) -> None:
    """report.json, then report.md, report.html and plots/ rendered from it."""
    write_json_atomic(directory / "report.json", report)
    write_human_reports(directory, report)
