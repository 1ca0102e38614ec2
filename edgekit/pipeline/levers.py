"""The report's figures for the levers: each ladder, each artifact with and without its importance matrix, and
per-layer sensitivity — gathered from the cache entries after the build, for `edgekit.report.model`.

"With and without" is a paired comparison: both artifacts are scored on the same tokens, so the difference of
their per-token KLD is bootstrapped over the same blocks (its interval is narrower than the two apart).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgekit.executors.ladder import LadderOutcome, Rung
from edgekit.plan.tasks import Bootstrap, BundleTask, Comparison, QuantizeTask, TargetPlan, ValidateTask
from edgekit.signoff.gates import judge_artifact
from edgekit.signoff.metrics import BlockBootstrap
from edgekit.stages import quantize
from edgekit.stages.validate import TOKEN_FILE
from edgekit.store.cache import CacheEntry
from edgekit.store.results import SensitivityResult, ValidateResult

FIGURES = ("kld_mean", "top1", "ppl_ratio", "kld_p99")


def _figures(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: {"value": metrics[k]["value"], "ci95": metrics[k]["ci95"]} for k in FIGURES if k in metrics}


def _rung(rung: Rung, kept: bool) -> dict[str, Any]:
    return {
        "label": rung.label,
        "scheme": rung.scheme,
        "artifact": rung.artifact,
        "verdict": rung.verdict,
        "kept": kept,
        "size": rung.size,
        "bits_per_weight": rung.bits_per_weight,
        "metrics": _figures(rung.metrics),
        "miss": rung.miss,
        "reasons": rung.judged.reasons if rung.judged is not None else [],
        "decode_tok_s": rung.decode_tok_s,
        "measured_on": rung.measured_on,
    }


def ladder_figures(outcome: LadderOutcome) -> dict[str, Any]:
    return {
        "target": outcome.target,
        "objective": outcome.objective,
        "passed": outcome.passed,
        "kept": outcome.rungs[outcome.kept].label,
        "reason": outcome.reason,
        "candidates": [_rung(r, i == outcome.kept) for i, r in enumerate(outcome.rungs)],
    }


def _side(plan_quantize: QuantizeTask, validate: ValidateTask, entries: dict[str, CacheEntry], target: TargetPlan
          ) -> dict[str, Any]:  # fmt: skip
    artifact = quantize.artifact(plan_quantize, entries[plan_quantize.key])
    result = ValidateResult.of(entries[validate.key])
    return {
        "artifact": plan_quantize.name,
        "size": artifact.size,
        "bits_per_weight": artifact.details.get("bits_per_weight"),
        "verdict": judge_artifact(result, target.gates).verdict,
        "metrics": _figures(result.metrics),
    }


def comparison_figures(target: TargetPlan, comparison: Comparison, entries: dict[str, CacheEntry],
                       bootstrap: Bootstrap) -> dict[str, Any]:  # fmt: skip
    """The target's artifact with its lever and without, on the same tokens; the paired differences."""
    assert target.validate is not None
    with_entry, without_entry = entries[target.validate.key], entries[comparison.validate.key]
    with np.load(with_entry.path / TOKEN_FILE) as a, np.load(without_entry.path / TOKEN_FILE) as b:
        kld, top1 = a["kld"].astype(np.float64) - b["kld"], a["top1"].astype(np.float64) - b["top1"]
    boot = BlockBootstrap(len(kld), bootstrap.block_tokens, bootstrap.resamples, bootstrap.seed)
    details = quantize.artifact(target.quantize, entries[target.quantize.key]).details
    return {
        "target": target.name,
        "lever": comparison.lever,
        "scheme": target.scheme,
        "with": _side(target.quantize, target.validate, entries, target),
        "without": _side(comparison.quantize, comparison.validate, entries, target),
        "difference": {"kld_mean": boot.mean(kld).to_dict(), "top1": boot.mean(top1).to_dict()},
        "lever_details": details.get(comparison.lever) or {},
    }


def lever_figures(task: BundleTask, entries: dict[str, CacheEntry], ladders: dict[str, LadderOutcome]
                  ) -> dict[str, Any]:  # fmt: skip
    comparisons = [comparison_figures(t, c, entries, task.report.bootstrap)
                   for t in task.targets for c in t.comparisons if t.validate is not None]  # fmt: skip
    sensitivity = [{"target": t.name, "scheme": t.scheme, **SensitivityResult.of(entries[t.sensitivity.key]).to_json()}
                   for t in task.targets if t.sensitivity is not None]  # fmt: skip
    return {"ladders": [ladder_figures(o) for o in ladders.values()], "comparisons": comparisons,
            "sensitivity": sensitivity}  # fmt: skip
