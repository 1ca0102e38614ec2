"""report: the accuracy sign-off. report.json for machines; report.md and report.html for people."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from edgekit.fsutil import write_json_atomic

REPORT_SCHEMA = 1


def build_report(
    *,
    name: str,
    recipe: Any,
    checkpoint: Any,
    reference: dict[str, Any] | None,
    noise_floor: dict[str, Any] | None,
    artifacts: list[dict[str, Any]],
    bench: dict[str, Any] | None,
    versions: dict[str, Any],
    command: str,
) -> dict[str, Any]:
    return {
        "schema_version": REPORT_SCHEMA,
        "bundle": name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "signoff": {
            "recipe": {"path": str(recipe.path), "sha256": recipe.sha256},
            "source": {
                "uri": checkpoint.uri,
                "revision": checkpoint.revision,
                "files": [f.__dict__ for f in checkpoint.files],
                "reconstructed_from": checkpoint.reconstructed_from,
                "notes": list(checkpoint.notes),
            },
            "artifacts": [{"name": a["name"], "sha256": a.get("sha256"), "verdict": a["verdict"]} for a in artifacts],
            "versions": versions,
            "reference": None
            if reference is None
            else {k: reference.get(k) for k in ("device", "dtype", "device_name", "tokens", "scored_tokens", "text")},
            "command": command,
        },
        "reference": reference,
        "noise_floor": noise_floor,
        "artifacts": artifacts,
        "bench": bench,
    }


def write_reports(directory: Path, report: dict[str, Any]) -> None:
    write_json_atomic(directory / "report.json", report)
    from edgekit.stages import report_render

    report_render.write_human_reports(directory, report)
