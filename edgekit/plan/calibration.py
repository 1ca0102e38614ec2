"""Calibration tokens for data-aware quantization, cut once in the plan and never from the scored tokens.

The validation text is tokenized once; validation scores its first tokens (the windows, up to
`max_tokens`) and a data-aware target calibrates on the last `calibration_samples × calibration_tokens`
tokens (an importance matrix: on the last `imatrix_chunks × imatrix_context`; every candidate of a ladder
that is data-aware: on its own). Both are ranges of one token stream, recorded with their hashes, and a
recipe where they would overlap is refused before any work (exit 2, with the numbers). `[calibration] text`
gives a text of its own instead (its last tokens are used); when it is the validation text, the same rule holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.backends.catalog import build_backend
from edgekit.errors import RecipeError, RecipeProblem, SourceError
from edgekit.plan.eval_tokenizer import open_tokenizer, tokenizer_versions
from edgekit.plan.tasks import FetchTask
from edgekit.recipe.load import Recipe
from edgekit.recipe.targets import Target
from edgekit.signoff.evaldata import CalibrationSet, EvalPlan, EvalText, TokenIds, load_text
from edgekit.sources.tokenizer import TokenizerKind
from edgekit.store.memo import remembered

MEMO_FORMAT = 1


@dataclass(frozen=True)
class CalibrationSource:
    """The calibration text's token stream: every data-aware step reads the end of it, past every scored token."""

    text: EvalText
    origin: str
    ids: np.ndarray
    fetch: FetchTask
    cache_root: Path
    tokenizer: TokenizerKind  # what cut `ids`

    def cut(self, need: int) -> CalibrationSet:
        """The last `need` tokens (checked by `calibration_source` for every step of the recipe)."""
        start = len(self.ids) - need
        return CalibrationSet(self.origin, self.text.sha256, start, len(self.ids), TokenIds.of(self.ids[start:]),
                              self.tokenizer)  # fmt: skip

    def char_start(self, token: int) -> int:
        """Where token `token` starts in the text: tools that tokenize text themselves read from there."""
        inputs = {"format": MEMO_FORMAT, "source": self.fetch.key, "text": self.text.sha256, "token": token,
                  "tokenizer": tokenizer_versions(self.tokenizer)}  # fmt: skip

        def find() -> int:
            with open_tokenizer(self.fetch, self.tokenizer) as tokenizer:
                _, offsets = tokenizer.tokenize_with_offsets(self.text.text)
            return int(offsets[token][0])

        return int(remembered(self.cache_root, "calibration-chars", inputs, find))


def calibration_source(
    recipe: Recipe,
    targets: list[Target],
    fetch: FetchTask,
    cache_root: Path,
    evaluation: EvalPlan | None,
    tokenizer: TokenizerKind,
) -> CalibrationSource | None:
    """The calibration tokens when any target (or ladder candidate) is data-aware; refuses overlap with the
    scored tokens, and too short a text, for each of them."""
    names = [t.name for t in recipe.targets]
    needs = [(t.name, names.index(t.name), build_backend(t.backend).calibration_tokens(c.scheme, c.options))
             for t in targets for c in (t.candidates or [t])]  # fmt: skip
    needs = [(name, i, n) for name, i, n in needs if n]
    if not needs:
        return None
    origin = recipe.spec.calibration.text or recipe.spec.validation.text
    key = "calibration.text" if recipe.spec.calibration.text else "validation.text"
    text = load_text(origin, recipe.base_dir)
    ids = np.asarray(_token_ids(text, fetch, cache_root, tokenizer), dtype=np.int32)
    scored_end = len(evaluation.ids) if evaluation is not None and evaluation.text.sha256 == text.sha256 else 0
    problems = {}
    for name, i, need in needs:
        start, where = len(ids) - need, f"targets[{i}].options"
        if start < 0:
            problems[where] = RecipeProblem(where, f"{name} calibrates on {need:,} tokens but {key} ({origin}) has "
                                                   f"{len(ids):,}; lower calibration_samples or calibration_tokens "
                                                   "(imatrix_chunks or imatrix_context), or give a longer "
                                                   "[calibration] text")  # fmt: skip
        elif start < scored_end:
            problems[where] = RecipeProblem(where, _overlap(name, need, start, len(ids), scored_end, origin))
    if problems:
        raise RecipeError(recipe.path, list(problems.values()))
    return CalibrationSource(text, origin, ids, fetch, cache_root, tokenizer)


def _overlap(name: str, need: int, start: int, total: int, scored_end: int, origin: str) -> str:
    return (
        f"{name} would calibrate on tokens {start:,}–{total:,} of {origin} ({need:,} tokens from its end) but "
        f"validation scores tokens 0–{scored_end:,} of it: the ranges overlap by {scored_end - start:,} tokens, "
        "and calibrating on scored tokens would flatter the artifact. Lower [validation] max_tokens or the "
        "target's calibration_samples / calibration_tokens, or give a [calibration] text of its own"
    )


def _token_ids(text: EvalText, fetch: FetchTask, cache_root: Path, tokenizer: TokenizerKind) -> list[int]:
    """The whole text's token ids, remembered per (source, text, tokenizer and its versions)."""
    inputs = {"format": MEMO_FORMAT, "source": fetch.key, "text": text.sha256,
              "tokenizer": tokenizer_versions(tokenizer)}  # fmt: skip

    def tokenize() -> list[int]:
        with open_tokenizer(fetch, tokenizer) as opened:
            return opened.tokenize(text.text)

    ids = remembered(cache_root, "calibration-tokens", inputs, tokenize)
    if not ids:
        raise SourceError(f"{text.origin}: the calibration text has no tokens", "point it at a longer text")
    return ids
