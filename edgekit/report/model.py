"""The report model: the accuracy sign-off as one dict (report.json for machines; report.md/.html for people).

`build_report` turns what the pipeline measured into one self-contained document: everything the
human reports show comes from report.json (so a reader can check a figure against the JSON), and
nothing in it points into the stage cache — the per-token KLD arrays of the validate entries are
summarised (log-binned histogram and quantiles) into the report itself.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.report.text import type_mix_text
from edgekit.runtime.bench.results import BenchResult
from edgekit.signoff.gates import Judgement, Verdict
from edgekit.signoff.metrics import ESTIMATORS
from edgekit.store.results import ValidateResult

if TYPE_CHECKING:
    from edgekit.plan.tasks import ReportTask, TargetPlan
    from edgekit.store.records import Checkpoint

REPORT_SCHEMA = 1
# Per-token KLD histogram: 8 log-spaced bins a decade from 1e-6 to 10 nats. Values below the first
# edge (including the small negative values the unbiased tail estimate can give) are counted apart.
KLD_BIN_EDGES = np.logspace(-6, 1, 57)
KLD_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)


@dataclass
class Validated:
    """A validated artifact: what it measured (its validate entry) and what its gates make of it."""

    result: ValidateResult
    cache_key: str  # the validate entry
    token_file: str  # its per-token figures (summarised into the report, never pointed at)
    judgement: Judgement
    gates: dict[str, Any]  # the thresholds judged

    def to_json(self) -> dict[str, Any]:
        return {**self.result.to_json(), "cache_key": self.cache_key, "token_file": self.token_file,
                **self.judgement.to_json(), "gates": self.gates}  # fmt: skip


@dataclass(frozen=True)
class Built:
    """What a built artifact is: its size and the precisions written."""

    size: int
    tensor_types: dict[str, Any]
    bits_per_weight: float | None
    details: dict[str, Any]


@dataclass
class ArtifactRow:
    """One artifact as the report lists it: in the bundle (`path`), left out by its gates (`excluded`), or an
    optional target that was not built (neither `built` nor `validation`)."""

    name: str
    backend: str
    scheme: str
    required: bool
    built: Built | None = None
    path: str | None = None  # in the bundle, with its sha256
    sha256: str | None = None
    excluded: bool = False
    validation: Validated | None = None
    unvalidated: Verdict = Verdict.NOT_VALIDATED  # the verdict without a validation: not validated, not built
    reasons: list[str] = field(default_factory=list)  # why it was not built

    @property
    def verdict(self) -> Verdict:
        return self.validation.judgement.verdict if self.validation is not None else self.unvalidated

    def to_json(self) -> dict[str, Any]:
        """The row's keys in report.json (a key is left out where the row has nothing to say)."""
        out: dict[str, Any] = {"name": self.name, "backend": self.backend, "scheme": self.scheme}
        if self.path is not None:
            out.update(path=self.path, sha256=self.sha256)
        if self.built is not None:
            out.update(size=self.built.size, tensor_types=self.built.tensor_types,
                       bits_per_weight=self.built.bits_per_weight, details=self.built.details)  # fmt: skip
        out["required"] = self.required
        if self.excluded:
            out["excluded"] = True
        if self.validation is not None:
            return {**out, **self.validation.to_json()}
        out.update(verdict=self.unvalidated, metrics=None)
        if self.reasons:
            out["reasons"] = list(self.reasons)
        return out


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
    measured = [
        (a, bits) for a in artifacts if (a.get("metrics") or {}).get("kld_mean") and (bits := nominal_bits(a["scheme"]))
    ]
    for hi, hi_bits in measured:
        for lo, lo_bits in measured:
            if hi_bits <= lo_bits or hi.get("backend") != lo.get("backend"):
                continue
            a, b = hi["metrics"]["kld_mean"], lo["metrics"]["kld_mean"]
            if a["ci95"][0] is None or b["ci95"][1] is None or a["ci95"][0] <= b["ci95"][1]:
                continue
            text = (
                f"{hi['name']} (nominally {hi_bits}-bit) has a higher mean KLD than "
                f"{lo['name']} (nominally {lo_bits}-bit): {a['value']:.4g} "
                f"[{a['ci95'][0]:.4g}, {a['ci95'][1]:.4g}] vs {b['value']:.4g} [{b['ci95'][0]:.4g}, "
                f"{b['ci95'][1]:.4g}]; the intervals do not overlap."
            )
            mixes = [f"{x['name']} wrote {type_mix_text(x.get('tensor_types') or {})}" for x in (hi, lo)]
            if all(x.get("tensor_types") for x in (hi, lo)):
                text += " Tensor types actually written: " + "; ".join(mixes) + "."
            findings.append({"kind": "precision_order", "artifacts": [hi["name"], lo["name"]], "text": text})
    return findings


def _artifact_notes(row: dict[str, Any], target_note: str | None) -> list[str]:
    notes = []
    if target_note:
        notes.append(target_note.strip())
    details = row.get("details") or {}
    if details.get("note"):
        notes.append(str(details["note"]))
    return notes


def _artifact_row(row: dict[str, Any], target: TargetPlan | None) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k != "token_file"}
    if target is not None:
        out.setdefault("backend", target.backend)
        out.setdefault("scheme", target.scheme)
        out.setdefault("required", target.required)
        if out.get("gates") is not None:
            out["gate_sources"] = dict(target.gate_sources)
    token_file = row.get("token_file")
    if token_file and Path(token_file).is_file():
        out["kld_distribution"] = kld_distribution(token_file)
    out["notes"] = _artifact_notes(row, target.note if target is not None else None)
    return out


def _reference_summary(reference: dict[str, Any] | None) -> dict[str, Any] | None:
    if reference is None:
        return None
    out = {k: v for k, v in reference.items() if k != "cloze"}
    cloze = reference.get("cloze") or {}
    out["cloze_items"] = len(cloze.get("items", []))
    return out


def _noise_floor(noise_floor: dict[str, Any] | None) -> dict[str, Any] | None:
    if noise_floor is None:
        return None
    kept = {k: v for k, v in noise_floor.items() if k != "token_file"}
    if noise_floor.get("token_file") and Path(noise_floor["token_file"]).is_file():
        kept["kld_distribution"] = kld_distribution(noise_floor["token_file"])
    return kept


def _reference_statement(reconstructed: str | None) -> str:
    if not reconstructed:
        return "The reference is the source checkpoint as published."
    return (
        f"The reference was reconstructed from a quantized file ({reconstructed}): the reference and "
        "every artifact start from its dequantized weights, so these figures measure the loss added "
        "by each artifact on top of that file, not the loss against the original full-precision model."
    )


def _eval_data(ref: dict[str, Any] | None, task: ReportTask) -> dict[str, Any] | None:
    if ref is None:
        return None
    text = ref.get("text") or {}
    return {
        "origin": text.get("origin"),
        "sha256": text.get("sha256"),
        "tokens": ref.get("tokens"),
        "scored_tokens": ref.get("scored_tokens"),
        "windows": ref.get("windows"),
        "context_length": ref.get("context_length"),
        "cloze_items": ref.get("cloze_items"),
        "tasks": list(task.tasks_files),
        "scored_token_range": list(task.scored_range) if task.scored_range else None,
        "scored_ids_sha256": task.scored_sha256,
        "tokenizer": task.tokenizer,
    }


def _how_validated(row: dict[str, Any]) -> dict[str, Any]:
    """The engine settings validation ran the artifact with, and the sequential looks it took (if any)."""
    seq = {k: v for k, v in (row.get("sequential") or {}).items() if k != "history"}
    return {"engine": row["engine"], "sequential": seq or None}


def _calibrated(row: dict[str, Any]) -> bool:
    return bool((row.get("details") or {}).get("calibration"))


def _signoff(
    task: ReportTask,
    targets: tuple[TargetPlan, ...],
    checkpoint: Checkpoint,
    ref: dict[str, Any] | None,
    rows: list[dict[str, Any]],
    versions: dict[str, Any],
    created: str,
) -> dict[str, Any]:
    reference_keys = ("device", "dtype", "device_name", "tokens", "scored_tokens", "text")
    return {
        "date": created,
        "recipe": {"path": task.recipe_path, "sha256": task.recipe_sha256},
        "source": checkpoint.provenance(),
        "reference_statement": _reference_statement(checkpoint.reconstructed_from),
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
        "reference": None if ref is None else {k: ref.get(k) for k in reference_keys},
        "eval_data": _eval_data(ref, task),
        "calibration": {a["name"]: (a.get("details") or {})["calibration"] for a in rows if _calibrated(a)},
        "validation": {a["name"]: _how_validated(a) for a in rows if a.get("engine")},
        "thresholds": {a["name"]: a.get("gates") for a in rows},
        "policy": {
            "on_inconclusive": task.on_inconclusive,
            "exclude_failed": task.exclude_failed,
            "required": [t.name for t in targets if t.required],
        },
        "verdicts": {a["name"]: a["verdict"] for a in rows},
        "statistics": {
            "interval": "95% percentile block bootstrap",
            "kld_estimators": dict(ESTIMATORS),
            "block_tokens": task.bootstrap.block_tokens,
            "resamples": task.bootstrap.resamples,
            "seed": task.bootstrap.seed,
            "top_k": (ref or {}).get("top_k"),
            "tail_samples": (ref or {}).get("tail_samples"),
        },
        "command": task.command,
        "reproduce": task.reproduce,
    }


def build_report(
    task: ReportTask,
    *,
    targets: tuple[TargetPlan, ...],
    checkpoint: Checkpoint,
    reference: dict[str, Any] | None,
    noise_floor: dict[str, Any] | None,
    artifacts: list[ArtifactRow],
    bench: BenchResult | None,
    versions: dict[str, Any],
    levers: dict[str, Any] | None = None,
    repairs: list[dict[str, Any]] | None = None,
    memory: dict[str, Any] | None = None,
    benches: dict[str, BenchResult] | None = None,
) -> dict[str, Any]:
    """report.json: the document every human report is rendered from (plain JSON: rows and results as stored)."""
    by_name = {t.name: t for t in targets}
    rows = [_artifact_row(a.to_json(), by_name.get(a.name)) for a in artifacts]
    ref = _reference_summary(reference)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "schema_version": REPORT_SCHEMA,
        "bundle": task.bundle_name,
        "created": created,
        "signoff": _signoff(task, targets, checkpoint, ref, rows, versions, created),
        "reference": ref,
        "noise_floor": _noise_floor(noise_floor),
        "artifacts": rows,
        "findings": order_findings(rows),
        "bench": bench.to_json() if bench is not None else None,
        "speed_only": _speed_only(checkpoint),
        "ladders": (levers or {}).get("ladders", []),
        "comparisons": (levers or {}).get("comparisons", []),
        "sensitivity": (levers or {}).get("sensitivity", []),
        "cache_repairs": repairs or [],
        "memory": memory,
        # box → its bench (same layout as "bench"), from [[bench.boxes]]
        "benches": {box: b.to_json() for box, b in (benches or {}).items()},
    }


def _speed_only(checkpoint: Checkpoint) -> str | None:
    """What the report says of a model with random weights (a synthetic:// source), else None."""
    if not checkpoint.speed_only:
        return None
    return (
        f"{checkpoint.uri}: {'; '.join(checkpoint.notes)}. Its text is noise: the figures say what a model of "
        "this shape does on this machine."
    )
