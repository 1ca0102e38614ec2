"""A readable summary of a bundle, from its manifest, report and runtime config (no heavy imports).

The report's shapes vary by backend and by edgekit version — a tensor-type histogram maps each type
to `{tensors, params, bytes}` or to a bare count, a metric is `{value, ci95, n}` or a bare number —
so every field read here is read defensively: a summary never fails on a shape the report allows.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgekit.manifest import load_manifest
from edgekit.report.text import type_mix_text

METRICS = ("kld_mean", "top1", "ppl_ratio")


def metric_value(metric: Any) -> float | None:
    """A metric's estimate: `{value, ...}` or a bare number; None when absent or not a number."""
    value = metric.get("value") if isinstance(metric, Mapping) else metric
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def type_mix(tensor_types: Any) -> str:
    return type_mix_text(dict(tensor_types)) if isinstance(tensor_types, Mapping) and tensor_types else "—"


def summarise(bundle: Path) -> dict[str, Any]:
    manifest = load_manifest(bundle)
    report_path = bundle / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    by_name = {a.get("name"): a for a in report.get("artifacts", []) if isinstance(a, Mapping)}
    artifacts = []
    for a in manifest.get("artifacts", []):
        metrics = (by_name.get(a["name"]) or {}).get("metrics") or {}
        bits = a.get("bits_per_weight")
        row = {
            "name": a["name"],
            "backend": a.get("backend"),
            "scheme": a.get("scheme"),
            "path": a.get("path"),
            "size": a.get("size"),
            "bits_per_weight": bits if isinstance(bits, int | float) else None,
            "type_mix": type_mix(a.get("tensor_types")),
            "verdict": a.get("verdict", "—"),
        }
        row.update({key: metric_value(metrics.get(key)) for key in METRICS})
        artifacts.append(row)
    runtime = (bundle / "runtime.toml").read_text() if (bundle / "runtime.toml").is_file() else ""
    runtime_line = " ".join(line.strip() for line in runtime.splitlines() if line and not line.startswith(("#", "[")))
    source = manifest.get("source") or {}
    return {
        "bundle": str(bundle),
        "name": manifest.get("name"),
        "release": manifest.get("release", 0),
        "created": manifest.get("created"),
        "edgekit_version": manifest.get("edgekit_version"),
        "source": f"{source.get('uri')}" + (f"@{source['revision']}" if source.get("revision") else ""),
        "reconstructed_from": source.get("reconstructed_from"),
        "default_artifact": manifest.get("default_artifact"),
        "artifacts": artifacts,
        "runtime": runtime_line,
        "runtime_config": _runtime_table(runtime),
    }


def _runtime_table(text: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError:
        return {}
    return dict(data.get("runtime", data))
