"""Evaluation data: the held-out text, its chunks, the cloze task and multiple-choice task files.

All token ids come from one tokenizer (`TokenizerKind`: Hugging Face's, or llama.cpp's reading of a GGUF
source); every backend is first checked to tokenize the same text to the same ids, then fed these ids, so
every candidate is scored on the same tokens.

The cloze task needs no data of its own: its items are sentence-final words inside the perplexity
windows (see `cloze_items`).

Perplexity follows llama.cpp's perplexity tool: the text is cut into non-overlapping windows of
`context_length` tokens and only the second half of each window is scored, so every scored token
has at least half a window of context.

Multiple-choice task files are JSONL, one item per line:
    {"context": "The capital of France is", "choices": [" Paris", " Rome"], "answer": 0}
Choices are appended to the context verbatim (put the leading space in the choice). Each pair is
tokenized as lm-evaluation-harness does (`_encode_pair`): trailing whitespace of the context moves to the
continuation, context + continuation are tokenized together, and the continuation's tokens are what
follows the context's own tokens; an empty context is the tokenizer's prefix token (BOS, else EOS), so
the first continuation token is predicted from it, never from another position. Each choice is scored by
the summed log-likelihood of its tokens given the context (`acc`); `acc_norm` divides by the choice's
length in bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._util.hashing import sha256_text
from edgekit.errors import SourceError
from edgekit.sources import resolve_path
from edgekit.sources.tokenizer import TokenizerKind

Tokenize = Callable[[str], list[int]]


@dataclass(frozen=True)
class EvalText:
    text: str
    sha256: str
    origin: str

    def key_form(self) -> dict[str, str]:
        return {"sha256": self.sha256}


def load_text(value: str, base_dir: Path) -> EvalText:
    path = resolve_path(value, base_dir)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"{value}: eval text is not UTF-8 ({exc.reason} at byte {exc.start})", "save it as UTF-8"
        ) from None
    text = text.replace("\r\n", "\n")
    return EvalText(text, sha256_text(text), value)


@dataclass(frozen=True)
class Windows:
    """Token windows for perplexity: each window is evaluated from an empty context."""

    ids: np.ndarray  # all eval token ids (int32)
    length: int  # window length
    first_scored: int  # offset inside each window of the first scored logit

    @property
    def count(self) -> int:
        return len(self.ids) // self.length

    def window(self, i: int) -> np.ndarray:
        return self.ids[i * self.length : (i + 1) * self.length]

    def scored(self, i: int) -> tuple[slice, np.ndarray]:
        """Positions whose logits are scored in window i, and the tokens they should predict."""
        w = self.window(i)
        positions = slice(self.first_scored, self.length - 1)
        return positions, w[self.first_scored + 1 : self.length]

    @property
    def scored_per_window(self) -> int:
        return self.length - 1 - self.first_scored

    @property
    def scored_total(self) -> int:
        return self.count * self.scored_per_window


def make_windows(ids: list[int], context_length: int, max_tokens: int) -> Windows:
    usable = min(len(ids), max_tokens)
    if usable < context_length:
        raise SourceError(
            f"the eval text has {len(ids)} tokens, fewer than one window of context_length={context_length}",
            "use a longer [validation] text or a smaller context_length",
        )
    arr = np.asarray(ids[: usable - usable % context_length], dtype=np.int32)
    return Windows(arr, context_length, context_length // 2)


@dataclass(frozen=True)
class TokenIds:
    """Token ids as int32 bytes: hashable, picklable, and a numpy view away from an array."""

    data: bytes

    @classmethod
    def of(cls, ids: np.ndarray | list[int]) -> TokenIds:
        return cls(np.asarray(ids, dtype="<i4").tobytes())

    def array(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype="<i4").astype(np.int32)

    def __len__(self) -> int:
        return len(self.data) // 4

    def key_form(self) -> dict[str, object]:
        return {"sha256": hashlib.sha256(self.data).hexdigest(), "count": len(self)}


@dataclass(frozen=True)
class Prompt:
    """A short prompt as a chat model's template renders it, for greedy completions in the report."""

    text: str
    ids: tuple[int, ...]
    stop: tuple[int, ...]  # end-of-turn token ids: a completion stops there


@dataclass(frozen=True)
class EvalPlan:
    """The scored data of a build, resolved once: the text, its token ids, windows, cloze items and tasks."""

    text: EvalText
    ids: TokenIds  # the whole windows' tokens, as `tokenizer` cut the text
    context_length: int
    max_tokens: int
    cloze: tuple[ClozeItem, ...]
    cloze_settings: dict[str, object]
    tasks: tuple[ChoiceTask, ...]
    prompts: tuple[Prompt, ...] = ()  # empty when the model has no chat template
    tokenizer: TokenizerKind = TokenizerKind.HUGGING_FACE

    @property
    def windows(self) -> Windows:
        return Windows(self.ids.array(), self.context_length, self.context_length // 2)

    def key_form(self) -> dict[str, object]:
        return tokenizer_keyed(self.tokenizer) | {
            "text_sha256": self.text.sha256,
            "ids": self.ids.key_form(),
            "context_length": self.context_length,
            "max_tokens": self.max_tokens,
            "cloze": self.cloze_settings,
            "cloze_items": hashlib.sha256(repr([(c.window, c.start, c.end) for c in self.cloze]).encode()).hexdigest(),
            "tasks": [[t.name, t.sha256, hashlib.sha256(repr(t.items).encode()).hexdigest()] for t in self.tasks],
            "prompts": hashlib.sha256(repr(self.prompts).encode()).hexdigest(),
        }


@dataclass(frozen=True)
class CalibrationSet:
    """Token ids [start, end) of a text's token stream, for one data-aware target."""

    origin: str  # the text as the recipe names it
    text_sha256: str
    start: int
    end: int
    ids: TokenIds
    tokenizer: TokenizerKind = TokenizerKind.HUGGING_FACE

    def key_form(self) -> dict[str, Any]:
        return tokenizer_keyed(self.tokenizer) | {"text_sha256": self.text_sha256, "range": [self.start, self.end],
                                                  "ids": self.ids.key_form()}  # fmt: skip

    def record(self) -> dict[str, Any]:
        """How the manifest and the sign-off describe it."""
        return {"text": self.origin, "text_sha256": self.text_sha256, "token_range": [self.start, self.end],
                "ids_sha256": self.ids.key_form()["sha256"], "tokenizer": self.tokenizer.label}  # fmt: skip


def tokenizer_keyed(tokenizer: TokenizerKind) -> dict[str, str]:
    """The tokenizer that cut the ids, as it enters the keys of every task that reads them. Hugging Face ids keep
    the keys they had before llama.cpp could cut them (the entries made then stay valid)."""
    return {} if tokenizer is TokenizerKind.HUGGING_FACE else {"tokenizer": str(tokenizer)}


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# --- tasks ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskItem:
    """One scored sequence: `ids` is context + continuation; the continuation starts at `split`."""

    ids: tuple[int, ...]
    split: int
    group: int  # question index
    choice: int  # choice index within the question
    answer: int  # correct choice of the question
    nbytes: int  # bytes of the continuation text, for acc_norm


@dataclass(frozen=True)
class ChoiceTask:
    """A multiple-choice task file, tokenized: every (question, choice) pair is one scored item."""

    name: str
    kind: str  # "multiple_choice"
    items: tuple[TaskItem, ...]
    sha256: str

    @property
    def questions(self) -> int:
        return len({i.group for i in self.items})


@dataclass(frozen=True)
class ClozeItem:
    """A sentence-final word inside a perplexity window: tokens [start, end) of window `window`."""

    window: int
    start: int
    end: int


def cloze_items(
    text: str, offsets: list[tuple[int, int]], windows: Windows, limit: int, min_chars: int
) -> list[ClozeItem]:
    """Sentence-final words whose tokens lie in the scored half of a window.

    The model predicts the word from everything before it in the window (at least half a window);
    an item is correct only if every token of the word is the greedy choice, as lm-eval scores
    LAMBADA. Items come from the windows the perplexity pass evaluates anyway, so the task costs no
    extra forward passes on any backend.
    """
    by_start: dict[int, int] = {}
    for index, (a, _) in enumerate(offsets[: len(windows.ids)]):
        by_start.setdefault(a, index)
    items = []
    for match in re.finditer(r"(\s)([A-Za-z]+)[.!?]", text):
        if len(match.group(2)) < min_chars:
            continue
        first = by_start.get(match.start(1))
        if first is None:
            continue
        last = first
        while last < len(windows.ids) and offsets[last][1] < match.end(2):
            last += 1
        if last >= len(windows.ids) or offsets[last][1] != match.end(2):
            continue  # the word's last token runs past the word: not a clean word boundary
        window, start = divmod(first, windows.length)
        end = last + 1 - window * windows.length
        if window < windows.count and start >= windows.first_scored + 1 and end <= windows.length:
            items.append(ClozeItem(window, start, end))
    if len(items) > limit:
        step = len(items) / limit
        items = [items[int(i * step)] for i in range(limit)]
    return items


def cloze_correct(items: list[ClozeItem], window: int, ids: np.ndarray, argmax: np.ndarray) -> list[bool]:
    """Greedy full-word match for the items of one window; `argmax` is per position of the window."""
    return [
        bool((argmax[item.start - 1 : item.end - 1] == ids[item.start : item.end]).all())
        for item in items
        if item.window == window
    ]


def encode_pair(context: str, continuation: str, tokenize: Tokenize, prefix: int | None) -> tuple[list[int], list[int]]:
    """Context and continuation ids as lm-evaluation-harness's `_encode_pair` makes them."""
    if not context:
        if prefix is None:
            raise SourceError("an empty context needs a BOS or EOS token to condition on", "give every item a context")
        return [prefix], tokenize(continuation)
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenize(context + continuation)
    context_ids = tokenize(context)
    return context_ids, whole[len(context_ids) :]


def multiple_choice_task(
    path: Path, tokenize: Tokenize, max_context_tokens: int, prefix: int | None = None
) -> ChoiceTask:
    items: list[TaskItem] = []
    raw = path.read_text(encoding="utf-8")
    for line_no, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            context, choices, answer = row["context"], row["choices"], row["answer"]
            if not (isinstance(context, str) and isinstance(choices, list) and len(choices) >= 2):
                raise ValueError("context must be a string and choices a list of at least 2 strings")
            if not all(isinstance(c, str) and c for c in choices):
                raise ValueError("every choice must be a non-empty string")
            if not (isinstance(answer, int) and 0 <= answer < len(choices)):
                raise ValueError(f"answer must be an index into choices (0..{len(choices) - 1})")
        except (json.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
            raise SourceError(
                f"{path}:{line_no}: not a multiple-choice item ({exc})",
                'each line must be {"context": str, "choices": [str, ...], "answer": int}',
            ) from None
        group = len({i.group for i in items})
        for c_index, choice in enumerate(choices):
            ctx_ids, cont = encode_pair(context, choice, tokenize, prefix)
            ctx_ids = ctx_ids[-max_context_tokens:]
            if not cont:
                raise SourceError(f"{path}:{line_no}: choice {c_index} adds no token to the context",
                                  "make every choice at least one token long")  # fmt: skip
            items.append(TaskItem(tuple(ctx_ids + cont), len(ctx_ids), group, c_index, answer, len(choice.encode())))
    if not items:
        raise SourceError(f"{path}: no items", "add JSONL lines with context, choices and answer")
    return ChoiceTask(path.stem, "multiple_choice", tuple(items), sha256_text(raw))


@dataclass(frozen=True)
class ItemScore:
    loglik: float
    greedy: bool  # every continuation token was the argmax


def score_item(item: TaskItem, logits: np.ndarray) -> ItemScore:
    from edgekit.signoff.metrics import log_softmax

    if item.split < 1:  # the first continuation token needs a position before it (the prefix token at least)
        raise ValueError("a task item needs at least one context token")
    cont = np.asarray(item.ids[item.split :], dtype=np.int64)
    positions = np.arange(item.split - 1, len(item.ids) - 1)
    logp = log_softmax(logits[positions])
    loglik = float(np.take_along_axis(logp, cont[:, None], axis=-1).sum())
    greedy = bool((logp.argmax(-1) == cont).all())
    return ItemScore(loglik, greedy)


def task_correct(task: ChoiceTask, scores: list[ItemScore]) -> tuple[np.ndarray, np.ndarray]:
    """Per question: correct (acc) and correct by byte-normalised likelihood (acc_norm)."""
    by_group: dict[int, list[tuple[TaskItem, ItemScore]]] = {}
    for item, score in zip(task.items, scores, strict=True):
        by_group.setdefault(item.group, []).append((item, score))
    acc, acc_norm = [], []
    for group in sorted(by_group):
        entries = by_group[group]
        answer = entries[0][0].answer
        acc.append(int(np.argmax([s.loglik for _, s in entries])) == answer)
        acc_norm.append(int(np.argmax([s.loglik / max(1, i.nbytes) for i, s in entries])) == answer)
    return np.array(acc), np.array(acc_norm)
