"""report: the accuracy sign-off. report.json for machines; report.md and report.html for people.

`build_report` turns what the pipeline measured into one self-contained document: everything the
human reports show comes from report.json (so a reader can check a figure against the JSON), and
nothing in it points into the stage cache — the per-token KLD arrays of the validate entries are
summarised (log-binned histogram and quantiles) into the report itself.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.fsutil import write_json_atomic

REPORT_SCHEMA = 1
# Per-token KLD histogram: 8 log-spaced bins a decade from 1e-6 to 10 nats. Values below the first
# edge (including the small negative values the unbiased tail estimate can give) are counted apart.
KLD_BIN_EDGES = np.logspace(-6, 1, 57)
KLD_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)


def kld_distribution(token_file: Path | str) -> dict[str, Any]:
    """Summary of the per-token KLD stored in a validate entry's tokens.npz (or the noise floor's)."""
    with np.load(token_file, allow_pickle=False) as data:
        kld = data["kld"].astype(np.float64)
    counts, _ = np.histogram(kld, bins=KLD_BIN_EDGES)
    return {
        "n": int(kld.size),
        "edges": [float(f"{e:.6g}") for e in KLD_BIN_EDGES],
        "counts": counts.astype(int).tolist(),
        "below": int((kld < KLD_BIN_EDGES[0]).sum()),
        "above": int((kld >= KLD_BIN_EDGES[-1]).sum()),
        "negative": int((kld < 0).sum()),
        "mean": float(kld.mean()) if kld.size else None,
        "max": float(kld.max()) if kld.size else None,
        "quantiles": {f"{q:g}": float(np.quantile(kld, q)) for q in KLD_QUANTILES} if kld.size else {},
    }


def nominal_bits(scheme: str) -> int | None:
    """The bit width a scheme's name promises: Q4_K_M → 4, Q8_0 → 8, F16 → 16, int4_asym → 4."""
    found = re.search(r"(\d+)", scheme)
    return int(found.group(1)) if found else None


def order_findings(artifacts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs where the nominally more precise scheme has the clearly higher mean KLD (intervals apart)."""
    findings = []
    measured = [a for a in artifacts if (a.get("metrics") or {}).get("kld_mean") and nominal_bits(a["scheme"])]
    for hi in measured:
        for lo in measured:
            if nominal_bits(hi["scheme"]) <= nominal_bits(lo["scheme"]) or hi.get("backend") != lo.get("backend"):
                continue
            a, b = hi["metrics"]["kld_mean"], lo["metrics"]["kld_mean"]
            if a["ci95"][0] is None or b["ci95"][1] is None or a["ci95"][0] <= b["ci95"][1]:
                continue
            text = (
                f"{hi['name']} (nominally {nominal_bits(hi['scheme'])}-bit) has a higher mean KLD than "
                f"{lo['name']} (nominally {nominal_bits(lo['scheme'])}-bit): {a['value']:.4g} "
                f"[{a['ci95'][0]:.4g}, {a['ci95'][1]:.4g}] vs {b['value']:.4g} [{b['ci95'][0]:.4g}, "
                f"{b['ci95'][1]:.4g}]; the intervals do not overlap."
            )
            mixes = [f"{x['name']} wrote {type_mix_text(x.get('tensor_types') or {})}" for x in (hi, lo)]
            if all(x.get("tensor_types") for x in (hi, lo)):
                text += " Tensor types actually written: " + "; ".join(mixes) + "."
            findings.append({"kind": "precision_order", "artifacts": [hi["name"], lo["name"]], "text": text})
    return findings


def type_params(entry: Any) -> int:
    """Parameters of one tensor_types entry: {tensors, params, bytes} (GGUF) or a bare count."""
    if isinstance(entry, dict):
        entry = entry.get("params", 0)
    return int(entry) if isinstance(entry, int | float) and not isinstance(entry, bool) else 0


def type_mix_text(tensor_types: dict[str, Any]) -> str:
    total = sum(type_params(v) for v in tensor_types.values()) or 1
    ranked = sorted(tensor_types.items(), key=lambda kv: -type_params(kv[1]))
    return ", ".join(f"{k} {type_params(v) / total:.0%}" for k, v in ranked if type_params(v) / total >= 0.005)


def _artifact_notes(row: dict[str, Any], recipe_note: str | None) -> list[str]:
    notes = []
    if recipe_note:
        notes.append(recipe_note.strip())
    details = row.get("details") or {}
    if details.get("note"):
        notes.append(str(details["note"]))
    return notes


def _gate_sources(recipe: Any, target: Any) -> dict[str, str]:
    """Where each threshold came from: the backend's per-scheme default, [validation.gates] or the target."""
    sources = {}
    section = recipe.spec.validation.gates
    overridden = set(section.model_fields_set) if section is not None else set()
    own = set(target.gates.model_fields_set) if getattr(target, "gates", None) is not None else set()
    for gate in ("kld_mean_max", "kld_p99_max", "ppl_ratio_max", "top1_min", "task_drop_max"):
        if gate in own:
            sources[gate] = f"recipe [[targets]] {target.name}"
        elif gate in overridden:
            sources[gate] = "recipe [validation.gates]"
        else:
            sources[gate] = f"default for {target.backend} {target.scheme}"
    return sources


def _artifact_row(row: dict[str, Any], recipe: Any) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k != "token_file"}
    target = next((t for t in recipe.targets if t.name == row["name"]), None)
    if target is not None:
        out.setdefault("backend", target.backend)
        out.setdefault("scheme", target.scheme)
        out.setdefault("required", target.required)
        if out.get("gates") is not None:
            out["gate_sources"] = _gate_sources(recipe, target)
    token_file = row.get("token_file")
    if token_file and Path(token_file).is_file():
        out["kld_distribution"] = kld_distribution(token_file)
    out["notes"] = _artifact_notes(row, getattr(target, "note", None))
    return out


def _reference_summary(reference: dict[str, Any] | None) -> dict[str, Any] | None:
    if reference is None:
        return None
    out = {k: v for k, v in reference.items() if k != "cloze"}
    cloze = reference.get("cloze") or {}
    out["cloze_items"] = len(cloze.get("items", []))
    return out


def reproduce_command(recipe: Any) -> str:
    from edgekit.recipe import DEFAULT_RECIPE

    if Path(recipe.path).resolve() == DEFAULT_RECIPE.resolve():
        return "edgekit build"
    return f"edgekit build {shlex.quote(str(recipe.path))}"


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
    rows = [_artifact_row(a, recipe) for a in artifacts]
    if noise_floor is not None:
        noise_floor = {k: v for k, v in noise_floor.items() if k != "token_file"} | (
            {"kld_distribution": kld_distribution(noise_floor["token_file"])}
            if noise_floor.get("token_file") and Path(noise_floor["token_file"]).is_file()
            else {}
        )
    ref = _reference_summary(reference)
    cfg = recipe.spec.validation
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    reconstructed = checkpoint.reconstructed_from
    return {
        "schema_version": REPORT_SCHEMA,
        "bundle": name,
        "created": created,
        "signoff": {
            "date": created,
            "recipe": {"path": str(recipe.path), "sha256": recipe.sha256},
            "source": {
                "uri": checkpoint.uri,
                "revision": checkpoint.revision,
                "files": [f.__dict__ for f in checkpoint.files],
                "reconstructed_from": reconstructed,
                "notes": list(checkpoint.notes),
            },
            "reference_statement": (
                f"The reference was reconstructed from a quantized file ({reconstructed}): the reference and "
                "every artifact start from its dequantized weights, so these figures measure the loss added "
                "by each artifact on top of that file, not the loss against the original full-precision model."
                if reconstructed
                else "The reference is the source checkpoint as published."
            ),
            "artifacts": [
                {
                    "name": a["name"],
                    "sha256": a.get("sha256"),
                    "size": a.get("size"),
                    "verdict": a["verdict"],
                    "required": a.get("required"),
                    "excluded": bool(a.get("excluded")),
                }
                for a in rows
            ],
            "versions": versions,
            "reference": None
            if ref is None
            else {k: ref.get(k) for k in ("device", "dtype", "device_name", "tokens", "scored_tokens", "text")},
            "eval_data": None
            if ref is None
            else {
                "origin": (ref.get("text") or {}).get("origin"),
                "sha256": (ref.get("text") or {}).get("sha256"),
                "tokens": ref.get("tokens"),
                "scored_tokens": ref.get("scored_tokens"),
                "windows": ref.get("windows"),
                "context_length": ref.get("context_length"),
                "cloze_items": ref.get("cloze_items"),
                "tasks": list(cfg.tasks),
            },
            "thresholds": {a["name"]: a.get("gates") for a in rows},
            "policy": {
                "on_inconclusive": cfg.on_inconclusive,
                "exclude_failed": recipe.spec.bundle.exclude_failed,
                "required": [t.name for t in recipe.targets if t.required],
            },
            "verdicts": {a["name"]: a["verdict"] for a in rows},
            "statistics": {
                "interval": "95% percentile block bootstrap",
                "block_tokens": cfg.bootstrap_block_tokens,
                "resamples": cfg.bootstrap_resamples,
                "seed": cfg.seed,
                "top_k": (ref or {}).get("top_k"),
                "tail_samples": (ref or {}).get("tail_samples"),
            },
            "command": command,
            "reproduce": reproduce_command(recipe),
        },
        "reference": ref,
        "noise_floor": noise_floor,
        "artifacts": rows,
        "findings": order_findings(rows),
        "bench": bench,
    }


def write_reports(directory: Path, report: dict[str, Any]) -> None:
    write_json_atomic(directory / "report.json", report)
    from edgekit.stages import report_render

    report_render.write_human_reports(directory, report)
