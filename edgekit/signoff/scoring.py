"""Scoring a model against the stored reference: what validation and the noise floor share.

The reference keeps, per scored token, its top-k token ids and log-probabilities, `tail_samples` tokens
drawn from the rest of its distribution (for an unbiased KL estimate, see `edgekit.signoff.metrics.compare`)
and the log-probability of the actual next token: 1,028 bytes a token with k = 64 and 64 samples,
whatever the vocabulary. `evaluate` runs any `LogitsRunner` over the reference's windows and tasks;
`summarise` turns the per-token comparison into metrics with intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgekit.errors import TokenizerMismatchError
from edgekit.observe.progress import Progress, Task
from edgekit.signoff.evaldata import (
    ChoiceTask,
    ClozeItem,
    ItemScore,
    Windows,
    cloze_correct,
    first_difference,
    score_item,
    task_correct,
)
from edgekit.signoff.gates import Summary
from edgekit.signoff.metrics import (
    LEVEL,
    ReferenceSlice,
    TokenComparison,
    compare,
    concat,
    item_bootstrap,
    token_metrics,
)

ARRAYS = ("topk_ids", "topk_logp", "tail_ids", "tail_logp", "target_logp")


class LogitsRunner(Protocol):
    """The validation seam: logits for token ids, one implementation per backend and one for the reference."""

    name: str

    @property
    def vocab_size(self) -> int: ...

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> bytes: ...

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Return float32 logits of shape (len(ids), vocab) for `ids` evaluated from an empty context."""
        ...

    def close(self) -> None: ...


@dataclass
class Reference:
    """A reference entry, opened: its arrays memory-mapped, rows = scored tokens in window order."""

    key: str
    path: Path
    windows: Windows
    arrays: dict[str, np.ndarray]
    cloze: list[ClozeItem]
    cloze_correct: np.ndarray
    tasks: list[ChoiceTask]
    task_scores: dict[str, list[ItemScore]]
    completions: list[dict[str, Any]]  # the reference's greedy completions of the prompts (none when streamed)

    def window_slice(self, i: int) -> ReferenceSlice:
        per = self.windows.scored_per_window
        rows = slice(i * per, (i + 1) * per)
        return ReferenceSlice(**{name: np.asarray(self.arrays[name][rows]) for name in ARRAYS})


def open_arrays(folder: Path) -> dict[str, np.ndarray]:
    return {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS}


@dataclass
class Evaluation:
    tokens: TokenComparison
    cloze_correct: np.ndarray
    task_scores: dict[str, list[ItemScore]]


def score_task(task: ChoiceTask, runner: LogitsRunner, progress: Progress, who: str) -> list[ItemScore]:
    scores = []
    with progress.task(f"{who}  task {task.name} ({task.questions} questions)", total=len(task.items),
                       unit="choices") as t:  # fmt: skip
        for item in task.items:
            scores.append(score_item(item, runner.logits(item.ids)))
            t.advance()
    return scores


@dataclass
class WindowScores:
    """The per-token comparisons and cloze results of some windows, in window order."""

    parts: list[TokenComparison]
    cloze: list[bool]

    def evaluation(self, task_scores: dict[str, list[ItemScore]]) -> Evaluation:
        return Evaluation(concat(self.parts), np.array(self.cloze, dtype=bool), task_scores)


def score_windows(runner: LogitsRunner, ref: Reference, windows: range, shown: Task, into: WindowScores) -> None:
    """Run a candidate over windows `windows` of the reference, appending to `into`; one `shown.advance()` each."""
    w = ref.windows
    for i in windows:
        logits = runner.logits(w.window(i).tolist())
        positions, targets = w.scored(i)
        into.parts.append(compare(ref.window_slice(i), logits[positions], targets))
        into.cloze += cloze_correct(ref.cloze, i, w.window(i), logits.argmax(-1))
        shown.advance()


def score_tasks(
    runner: LogitsRunner, ref: Reference, progress: Progress, label: str, stage: str = "validate"
) -> dict[str, list[ItemScore]]:
    return {task.name: score_task(task, runner, progress, f"{stage}  {label}") for task in ref.tasks}


def evaluate(runner: LogitsRunner, ref: Reference, progress: Progress, label: str, stage: str = "validate"
             ) -> Evaluation:  # fmt: skip
    """Run a candidate over all the reference's windows and tasks (`stage` names the step on the progress line)."""
    scores = WindowScores([], [])
    count = ref.windows.count
    with progress.task(f"{stage}  {label}: {count} windows", total=count, unit="windows") as shown:
        score_windows(runner, ref, range(count), shown, scores)
    return scores.evaluation(score_tasks(runner, ref, progress, label, stage))


def check_tokenizer(runner: LogitsRunner, ref: Reference, text: str, backend: str) -> int:
    """The candidate must tokenize the eval text to the reference's ids; returns tokens compared."""
    ids = runner.tokenize(text)
    expected = ref.windows.ids.tolist()
    diff = first_difference(expected, ids[: len(expected)])
    if diff is not None:
        raise TokenizerMismatchError(backend, diff, expected[diff : diff + 5], ids[diff : diff + 5])
    return len(expected)


def save_evaluation(path: Path, evaluation: Evaluation) -> None:
    cmp = evaluation.tokens
    np.savez(
        path,
        kld=cmp.kld.astype(np.float32),
        nll=cmp.nll.astype(np.float32),
        nll_ref=cmp.nll_ref.astype(np.float32),
        top1=cmp.top1,
        dp=cmp.dp.astype(np.float32),
        tail_mass=cmp.tail_mass.astype(np.float32),
        kld_coarse=cmp.kld_coarse.astype(np.float32),
        top1_ids=cmp.top1_ids.astype(np.int32),
        cloze_correct=evaluation.cloze_correct,
    )


def load_evaluation(path: Path, task_scores: dict[str, list[list[Any]]]) -> Evaluation:
    data = np.load(path, allow_pickle=False)
    exact = ("top1", "top1_ids")  # booleans and token ids, as stored
    tokens = TokenComparison(**{f: data[f] if f in exact else data[f].astype(np.float64)
                                for f in TokenComparison.__dataclass_fields__})  # fmt: skip
    scores = {k: [ItemScore(*s) for s in v] for k, v in task_scores.items()}
    return Evaluation(tokens, data["cloze_correct"], scores)


def summarise(
    evaluation: Evaluation, ref: Reference, resamples: int, block_tokens: int, seed: int, level: float = LEVEL
) -> Summary:
    """Metrics with intervals at `level`; the evaluation may cover the first windows only (a sequential look)."""
    metrics = token_metrics(evaluation.tokens, block_tokens, resamples, seed, level)
    tasks: dict[str, Any] = {}
    done = len(evaluation.cloze_correct)  # the items of the windows scored so far: the first ones
    if done:
        acc = item_bootstrap(ref.cloze_correct[:done], evaluation.cloze_correct, resamples, seed, level)
        tasks["cloze"] = {k: v.to_dict() for k, v in acc.items()} | {"kind": "cloze", "questions": done}
    for task in ref.tasks:
        ref_acc, ref_norm = task_correct(task, ref.task_scores[task.name])
        cand_acc, cand_norm = task_correct(task, evaluation.task_scores[task.name])
        acc = item_bootstrap(ref_acc, cand_acc, resamples, seed, level)
        norm = item_bootstrap(ref_norm, cand_norm, resamples, seed, level)
        tasks[task.name] = {k: v.to_dict() for k, v in acc.items()} | {
            "kind": task.kind,
            "questions": task.questions,
            "acc_norm": {k: v.to_dict() for k, v in norm.items()},
        }
    return Summary({k: v.to_dict() for k, v in metrics.items()}, tasks)
