"""Calibration tokens for data-aware quantization, cut once in the plan and never from the scored tokens.

The validation text is tokenized once; validation scores its first tokens (the windows, up to
`max_tokens`) and a data-aware target calibrates on the last `calibration_samples × calibration_tokens`
tokens. Both are ranges of one token stream, recorded with their hashes, and a recipe where they would
overlap is refused before any work (exit 2, with the numbers). `[calibration] text` gives a text of
its own instead (its last tokens are used); when it is the validation text, the same rule holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.errors import RecipeError, RecipeProblem, SourceError
from edgekit.evaldata import CalibrationSet, EvalPlan, EvalText, TokenIds, load_text
from edgekit.memo import remembered
from edgekit.plan.tasks import FetchTask
from edgekit.recipe import Recipe, Target
from edgekit.registry import build_backend
from edgekit.versions import dist_version

MEMO_FORMAT = 1


def calibration_sets(
    recipe: Recipe, targets: list[Target], fetch: FetchTask, cache_root: Path, evaluation: EvalPlan | None
) -> dict[str, CalibrationSet]:
    """One calibration set per data-aware target (by artifact name); refuses overlap with the scored tokens."""
    needs = {t.name: build_backend(t.backend).calibration_tokens(t.scheme, t.options) for t in targets}
    needs = {name: n for name, n in needs.items() if n}
    if not needs:
        return {}
    origin = recipe.spec.calibration.text or recipe.spec.validation.text
    key = "calibration.text" if recipe.spec.calibration.text else "validation.text"
    text = load_text(origin, recipe.base_dir)
    ids = np.asarray(_token_ids(text, fetch, cache_root), dtype=np.int32)
    scored_end = len(evaluation.ids) if evaluation is not None and evaluation.text.sha256 == text.sha256 else 0
    names = [t.name for t in recipe.targets]
    sets, problems = {}, []
    for name, need in needs.items():
        start = len(ids) - need
        where = f"targets[{names.index(name)}].options"
        if start < 0:
            problems.append(RecipeProblem(where, f"{name} calibrates on {need:,} tokens but {key} ({origin}) has "
                                                 f"{len(ids):,}; lower calibration_samples or calibration_tokens, or "
                                                 "give a longer [calibration] text"))  # fmt: skip
        elif start < scored_end:
            problems.append(RecipeProblem(where, _overlap(name, need, start, len(ids), scored_end, origin)))
        else:
            sets[name] = CalibrationSet(origin, text.sha256, start, len(ids), TokenIds.of(ids[start:]))
    if problems:
        raise RecipeError(recipe.path, problems)
    return sets


def _overlap(name: str, need: int, start: int, total: int, scored_end: int, origin: str) -> str:
    return (
        f"{name} would calibrate on tokens {start:,}–{total:,} of {origin} ({need:,} tokens from its end) but "
        f"validation scores tokens 0–{scored_end:,} of it: the ranges overlap by {scored_end - start:,} tokens, "
        "and calibrating on scored tokens would flatter the artifact. Lower [validation] max_tokens or the "
        "target's calibration_samples / calibration_tokens, or give a [calibration] text of its own"
    )


def _token_ids(text: EvalText, fetch: FetchTask, cache_root: Path) -> list[int]:
    """The whole text's token ids from the reference tokenizer, remembered per (source, text, tokenizer versions)."""
    inputs = {
        "format": MEMO_FORMAT,
        "source": fetch.key,
        "text": text.sha256,
        "tokenizer": {"transformers": dist_version("transformers"), "tokenizers": dist_version("tokenizers")},
    }

    def tokenize() -> list[int]:
        from edgekit.sources.tokenizer import reference_tokenizer

        tokenizer_dir = fetch.tokenizer.location if fetch.tokenizer else ""
        tokenizer = reference_tokenizer(fetch.kind, fetch.uri, fetch.location, fetch.revision, tokenizer_dir)
        return tokenizer.tokenize(text.text)

    ids = remembered(cache_root, "calibration-tokens", inputs, tokenize)
    if not ids:
        raise SourceError(f"{text.origin}: the calibration text has no tokens", "point it at a longer text")
    return ids
