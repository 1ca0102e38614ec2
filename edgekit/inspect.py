"""A readable summary of a bundle, from its manifest, report and runtime config (no heavy imports)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgekit.manifest import load_manifest
from edgekit.report.text import type_mix_text


def summarise(bundle: Path) -> dict[str, Any]:
    manifest = load_manifest(bundle)
    report_path = bundle / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    by_name = {a["name"]: a for a in report.get("artifacts", [])}
    artifacts = []
    for a in manifest["artifacts"]:
        metrics = (by_name.get(a["name"]) or {}).get("metrics") or {}
        row = {
            "name": a["name"],
            "backend": a["backend"],
            "scheme": a["scheme"],
            "path": a["path"],
            "size": a["size"],
            "bits_per_weight": a.get("bits_per_weight"),
            "type_mix": type_mix_text(a["tensor_types"]) if a.get("tensor_types") else "—",
            "verdict": a.get("verdict", "—"),
        }
        for key in ("kld_mean", "top1", "ppl_ratio"):
            if key in metrics:
                row[key] = f"{metrics[key]['value']:.4g}"
        artifacts.append(row)
    runtime = (bundle / "runtime.toml").read_text() if (bundle / "runtime.toml").is_file() else ""
    runtime_line = " ".join(line.strip() for line in runtime.splitlines() if line and not line.startswith(("#", "[")))
    source = manifest["source"]
    return {
        "name": manifest["name"],
        "release": manifest.get("release", 0),
        "created": manifest["created"],
        "edgekit_version": manifest["edgekit_version"],
        "source": f"{source['uri']}" + (f"@{source['revision']}" if source.get("revision") else ""),
        "reconstructed_from": source.get("reconstructed_from"),
        "default_artifact": manifest.get("default_artifact"),
        "artifacts": artifacts,
        "runtime": runtime_line,
    }
