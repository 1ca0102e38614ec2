"""Grammar-constrained sampling for the llama.cpp engine: a sequence whose `Sampling.grammar` is a GBNF grammar
only ever samples tokens the grammar allows (structured output and tool calls in `serve`).

Each constrained sequence owns one llama.cpp grammar sampler (`llama_sampler_init_grammar`), created when it
samples its first token and freed when it finishes, so concurrent streams each follow their own grammar. Tokens
are still chosen by edgekit's numpy sampling (`edgekit.runtime.engines.sampling`); the grammar only says which
are allowed. As llama.cpp's own sampler does, the token is first sampled from the unmasked logits and checked
alone (one token through the grammar: cheap); only when the grammar rejects it is the whole vocabulary masked
and the token sampled again from what is left. Sampling a token from p and, when it is rejected, again from p
restricted to the allowed set is exactly sampling from that restricted p (greedy: the most likely allowed
token), so the shortcut changes speed, not results.

The log-probabilities reported for a constrained token (`take_logprobs`) are the model's, from the unmasked
logits: what validation scores, as for every other token.

A grammar sampler must never be told a token it rejects (llama.cpp aborts the process), and an end-of-generation
token is allowed only where the grammar is complete: the scheduler ends a sequence at that token, so a
constrained sequence must not `ignore_eos` (serve refuses the combination).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from edgekit.errors import EngineError
from edgekit.runtime.engines.base import Sampling
from edgekit.runtime.engines.sampling import logprobs_of, sample

ROOT = b"root"
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class GrammarMixin:
    """`grammar_problem` (the GrammarEngine protocol) and a `_pick` that honours `Sampling.grammar`."""

    _llama: Any
    _vocab: Any
    n_vocab: int
    _sampled: dict[int, Any]

    def _init_grammar(self) -> None:
        self._grammars: dict[int, Any] = {}  # seq → its llama_sampler
        self._vocabulary = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
        self._vocabulary["id"] = np.arange(self.n_vocab, dtype=np.int32)
        self._one = np.zeros(1, dtype=_TOKEN_DATA)

    def grammar_problem(self, grammar: str) -> str | None:
        """None when llama.cpp parses `grammar` (GBNF, start rule `root`), else what it said (its log has more)."""
        sampler = self._llama.llama_sampler_init_grammar(self._vocab, grammar.encode("utf-8"), ROOT)
        if not sampler:
            return "llama.cpp could not parse the grammar (set EDGEKIT_DEBUG=1 to see its log)"
        self._llama.llama_sampler_free(sampler)  # the vocabulary is only read: safe beside the engine's thread
        return None

    def _pick(self, seq: int, logits: np.ndarray, sampling: Sampling, rng: np.random.Generator) -> int:
        if sampling.grammar is None:
            return super()._pick(seq, logits, sampling, rng)  # type: ignore[misc]
        grammar = self._grammars.get(seq)
        if grammar is None:
            grammar = self._grammars[seq] = self._new_grammar(sampling.grammar)
        token = sample(logits, sampling, rng)
        if not self._allows(grammar, token):
            masked = self._masked(grammar, logits)
            if not np.isfinite(masked).any():
                raise EngineError(
                    f"the grammar of sequence {seq} allows no next token", "this is a bug in edgekit's grammar"
                )
            token = sample(masked, sampling, rng)
        self._llama.llama_sampler_accept(grammar, token)
        if sampling.logprobs is not None:
            self._sampled[seq] = logprobs_of(logits, token, sampling.logprobs)
        return token

    def _drop_grammar(self, seq: int) -> None:
        grammar = self._grammars.pop(seq, None)
        if grammar is not None:
            self._llama.llama_sampler_free(grammar)

    def _drop_grammars(self) -> None:
        for seq in list(getattr(self, "_grammars", {})):
            self._drop_grammar(seq)

    def _new_grammar(self, grammar: str) -> Any:
        sampler = self._llama.llama_sampler_init_grammar(self._vocab, grammar.encode("utf-8"), ROOT)
        if not sampler:
            raise EngineError("llama.cpp could not parse a grammar", "set EDGEKIT_DEBUG=1 to see its log")
        return sampler

    def _apply(self, grammar: Any, data: np.ndarray) -> None:
        """The grammar sets the logit of every token it rejects in `data` (a llama_token_data array) to -inf."""
        llama_cpp = self._llama
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
            size=data.size,
            selected=-1,
            sorted=False,
        )
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))

    def _allows(self, grammar: Any, token: int) -> bool:
        one = self._one
        one["id"], one["logit"], one["p"] = token, 0.0, 0.0
        self._apply(grammar, one)
        return bool(np.isfinite(one["logit"][0]))

    def _masked(self, grammar: Any, logits: np.ndarray) -> np.ndarray:
        """A copy of `logits` with -inf for every token the grammar rejects now."""
        data = self._vocabulary
        data["logit"] = logits
        data["p"] = 0.0
        self._apply(grammar, data)
        return np.array(data["logit"], dtype=np.float32)
