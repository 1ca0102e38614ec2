"""The runtime engine contract: what `run`, `serve`, `bench` and validation need from a backend.

An engine owns a loaded model. It prefills a sequence (`start`), then advances every active
sequence by one token per `step` — in one batch where the backend can (llama.cpp runs up to
`max_sequences` sequences in one context, so the weights are read once per step for all of them,
which is what makes small batches nearly free on a memory-bound CPU). Engines never import torch.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from edgekit.errors import UsageError
from edgekit.runtime.engines.prefix import Reuse


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    # Report each sampled token's log-probability and this many most likely alternatives (None: report none).
    logprobs: int | None = None
    # A GBNF grammar (start rule `root`) every sampled token must follow, for an engine that is a GrammarEngine.
    grammar: str | None = None


class Engine(Protocol):
    backend: str
    max_sequences: int  # how many sequences may be active at once (≤ runtime max_concurrent)

    @property
    def eos_ids(self) -> frozenset[int]: ...

    @property
    def chat_template(self) -> str | None: ...

    def tokenize(self, text: str, *, special: bool = False) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> bytes:
        """Bytes, not str: a token may end inside a UTF-8 character; callers decode incrementally."""
        ...

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """float32 (len(ids), vocab) logits of `ids` from an empty context (validation seam)."""
        ...

    def start(self, seq: int, prompt_ids: Sequence[int], sampling: Sampling) -> int:
        """Prefill `prompt_ids` as sequence `seq` and return its first generated token."""
        ...

    def step(self) -> dict[int, int]:
        """Generate the next token of every active sequence, in one batch where possible."""
        ...

    def finish(self, seq: int) -> None:
        """Free sequence `seq` (its KV cache slot)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Logprobs:
    """The log-softmax of the logits a token was sampled from (temperature and top-p not applied): the sampled
    token's, and the `top` most likely tokens' (most likely first)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@runtime_checkable
class LogprobsEngine(Protocol):
    """An engine that reports the log-probabilities of the tokens it samples for a `Sampling(logprobs=…)`."""

    def take_logprobs(self, seq: int) -> Logprobs | None:
        """The log-probabilities of the token `seq` sampled last (once: taking clears them)."""
        ...


@runtime_checkable
class GrammarEngine(Protocol):
    """An engine that samples only what a `Sampling(grammar=…)` GBNF grammar allows (llama.cpp's grammars)."""

    def grammar_problem(self, grammar: str) -> str | None:
        """None when the engine can follow `grammar`, else why not (it does not parse)."""
        ...


@runtime_checkable
class ServingEngine(Engine, Protocol):
    """What `serve`'s scheduler uses when an engine has it: prompts prefilled in chunks interleaved with the
    decode steps of running sequences, and the KV state of prompt prefixes reused (`edgekit.runtime.engines.
    prefix`). An engine without these is served through `start` (whole prompt at once) and `step`."""

    last_prompt_tokens: int  # prompt tokens the last `advance` computed (the scheduler's prefill budget learns from it)

    def pick_slot(self, free: Sequence[int], prompt_ids: Sequence[int]) -> int:
        """The free sequence id whose KV state serves `prompt_ids` best."""
        ...

    def admit(self, seq: int, prompt_ids: Sequence[int], sampling: Sampling) -> Reuse:
        """Make `seq` a sequence to prefill (reusing what its slot holds); nothing is computed yet."""
        ...

    def advance(self, prompt_budget: int) -> dict[int, int]:
        """One decode step of every generating sequence, with up to `prompt_budget` prompt tokens of the
        admitted ones; the new token of each sequence that produced one (a prompt's first token once its
        last chunk is in)."""
        ...


class VocabularyMixin:
    """The accessors of the Engine protocol every engine answers the same way, from what it read at load."""

    _eos: frozenset[int]
    _template: str | None

    @property
    def eos_ids(self) -> frozenset[int]:
        return self._eos

    @property
    def chat_template(self) -> str | None:
        return self._template


def checked_prompt(
    seq: int, prompt_ids: Sequence[int], max_sequences: int, active: Container[int], n_ctx: int
) -> list[int]:
    """The checks every engine's `start` makes: a free sequence id and a prompt that fits the context."""
    if not 0 <= seq < max_sequences:
        raise UsageError(f"sequence id {seq} is out of range", f"use 0 to {max_sequences - 1}")
    if seq in active:
        raise UsageError(f"sequence {seq} is active", "finish() it before starting it again")
    ids = [int(i) for i in prompt_ids]
    if not ids:
        raise UsageError("empty prompt", "pass at least one token")
    if len(ids) >= n_ctx:
        raise UsageError(
            f"prompt of {len(ids)} tokens does not fit the context of {n_ctx}",
            "shorten the prompt or raise n_ctx in runtime.local.toml",
        )
    return ids
