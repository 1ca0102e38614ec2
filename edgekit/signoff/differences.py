"""Where an artifact differs from the reference, shown the way a person would look for it.

Two views, as OpenVINO's who-what-benchmark shows generations: the spans of eval text around the tokens
with the highest KLD (each token with the reference's and the artifact's top-1 prediction for it), and,
for chat models, greedy completions of short prompts by the reference and the artifact with the first
token where they part. Completions use the validation seam: the reference's by repeated `logits()`
(any runner), the artifact's through its engine's own generation loop (`start`/`step`, what serves).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from edgekit.signoff.evaldata import Prompt
from edgekit.signoff.scoring import Evaluation, LogitsRunner, Reference

SPANS = 10
BEFORE, AFTER = 10, 3  # scored tokens shown before and after the worst one
CONTEXT_TOKENS = 24  # plain text shown before a span
COMPLETION_TOKENS = 32

Detokenize = Callable[[Sequence[int]], bytes]


def piece(detokenize: Detokenize, ids: Iterable[int]) -> str:
    return detokenize([int(i) for i in ids]).decode("utf-8", errors="replace")


def worst_spans(evaluation: Evaluation, ref: Reference, detokenize: Detokenize, count: int = SPANS) -> list[dict]:
    """The `count` highest-KLD tokens, each with the scored tokens around it in its window (spans never overlap)."""
    kld = evaluation.tokens.kld
    if not len(kld):
        return []
    per = ref.windows.scored_per_window
    taken = np.zeros(len(kld), dtype=bool)
    spans: list[dict[str, Any]] = []
    for row in np.argsort(-kld, kind="stable"):
        if len(spans) == count:
            break
        if taken[row]:
            continue
        window, offset = divmod(int(row), per)
        first = window * per + max(0, offset - BEFORE)
        last = window * per + min(per, offset + AFTER + 1)
        taken[first:last] = True
        spans.append(_span(evaluation, ref, detokenize, int(row), first, last))
    return spans


def _span(evaluation: Evaluation, ref: Reference, detokenize: Detokenize, row: int, first: int, last: int) -> dict:
    per, windows = ref.windows.scored_per_window, ref.windows
    window = row // per
    ids = windows.window(window)
    shift = windows.first_scored - window * per + 1  # scored row r predicts token r + shift of its window
    start = first + shift
    cmp = evaluation.tokens
    reference_top1 = ref.arrays["topk_ids"][first:last, 0]
    tokens = [
        {
            "text": piece(detokenize, [ids[r + shift]]),
            "kld": float(cmp.kld[r]),
            "reference_top1": piece(detokenize, [reference_top1[r - first]]),
            "artifact_top1": piece(detokenize, [cmp.top1_ids[r]]),
            "worst": r == row,
        }
        for r in range(first, last)
    ]
    return {
        "window": window,
        "token": int(row + shift),
        "kld": float(cmp.kld[row]),
        "context": piece(detokenize, ids[max(0, start - CONTEXT_TOKENS) : start]),
        "tokens": tokens,
    }


Advance = Callable[[], None]


def _nothing() -> None:
    pass


def greedy(runner: Any, prompt: Sequence[int], stop: Sequence[int], max_new: int = COMPLETION_TOKENS) -> list[int]:
    """Greedy continuation of `prompt`: the runner's own generation loop when it has one, else repeated logits."""
    if hasattr(runner, "generate"):
        return list(runner.generate(prompt, stop, max_new))
    out: list[int] = []
    for _ in range(max_new):
        token = int(np.argmax(runner.logits([*prompt, *out])[-1]))
        out.append(token)
        if token in stop:
            break
    return out


def reference_completions(runner: LogitsRunner, prompts: Sequence[Prompt], advance: Advance = _nothing
                          ) -> list[dict[str, Any]]:  # fmt: skip
    """What the reference stores: each prompt's ids and its greedy completion (`advance()` after each)."""
    out = []
    for p in prompts:
        out.append({"prompt": p.text, "prompt_ids": list(p.ids), "stop": list(p.stop),
                    "ids": greedy(runner, p.ids, p.stop)})  # fmt: skip
        advance()
    return out


def compared_completions(runner: Any, reference: Sequence[dict[str, Any]], detokenize: Detokenize,
                         advance: Advance = _nothing) -> list[dict]:  # fmt: skip
    """The artifact's greedy completion of each of the reference's prompts, and where the two part
    (`advance()` after each)."""
    out = []
    for entry in reference:
        mine = greedy(runner, entry["prompt_ids"], entry["stop"])
        advance()
        theirs = entry["ids"]
        split = next((i for i, (a, b) in enumerate(zip(theirs, mine, strict=False)) if a != b), None)
        if split is None and len(theirs) != len(mine):
            split = min(len(theirs), len(mine))
        at = len(theirs) if split is None else split
        out.append(
            {
                "prompt": entry["prompt"],
                "reference": piece(detokenize, theirs),
                "artifact": piece(detokenize, mine),
                "diverges_at": split,  # token index of the first difference; None: identical
                "common": piece(detokenize, theirs[:at]),
                "reference_token": piece(detokenize, theirs[at : at + 1]),  # the first divergent tokens
                "artifact_token": piece(detokenize, mine[at : at + 1]),
                "reference_after": piece(detokenize, theirs[at + 1 :]),
                "artifact_after": piece(detokenize, mine[at + 1 :]),
            }
        )
    return out
