"""The calibration text: what data-aware quantization learns from, kept apart from what validation scores.

One function answers "which text, from which token": importance matrices (`llama-imatrix`), OpenVINO's
data-aware INT4 and ONNX Runtime's outlier search all read it. Today it is the `[validation]` text, read
from the first token after the scored windows (validation scores the start of the same text; the
OpenVINO and ONNX Runtime children cut their windows from its end).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgekit.evaldata import EvalPlan, EvalText, load_text
from edgekit.recipe import Recipe


@dataclass(frozen=True)
class Calibration:
    text: EvalText
    start_token: int  # the first token (of the text as the reference tokenizer cuts it) that may be read
    source: str  # for the report and the manifest


def calibration_text(recipe: Recipe, evaluation: EvalPlan | None) -> Calibration:
    """The calibration text of this recipe, disjoint from the tokens validation scores."""
    cfg = recipe.spec.validation
    text = load_text(cfg.text, recipe.base_dir)
    scored = len(evaluation.ids) if evaluation is not None else 0
    return Calibration(text, scored, f"{cfg.text}, from token {scored:,} (after the {scored:,} validation tokens)")
