"""Token sampling in numpy: greedy, temperature and nucleus (top-p), and the log-probabilities of what was
sampled (`SampledLogprobs`). Shared by every engine."""

from __future__ import annotations

import numpy as np

from edgekit.runtime.engines.base import Logprobs, Sampling

# Nucleus sampling looks at the most likely tokens first and sorts the whole vocabulary only
# when these do not already hold `top_p` of the probability mass.
_NUCLEUS_FIRST = 256


def new_rng(sampling: Sampling) -> np.random.Generator:
    return np.random.default_rng(sampling.seed)


def sample(logits: np.ndarray, sampling: Sampling, rng: np.random.Generator) -> int:
    """One token id from float logits of shape (vocab,)."""
    if sampling.temperature <= 0.0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / sampling.temperature
    scaled -= scaled.max()
    probs = np.exp(scaled)
    probs /= probs.sum()
    if sampling.top_p >= 1.0:
        return int(rng.choice(probs.size, p=probs))
    candidates = _nucleus(probs, sampling.top_p)
    kept = probs[candidates]
    return int(candidates[rng.choice(kept.size, p=kept / kept.sum())])


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest set of most likely token ids whose probabilities sum to at least `top_p`."""
    first = min(_NUCLEUS_FIRST, probs.size)
    head = np.argpartition(-probs, first - 1)[:first]
    order = head[np.argsort(-probs[head], kind="stable")]
    if probs[order].sum() < top_p:
        order = np.argsort(-probs, kind="stable")
    cumulative = np.cumsum(probs[order])
    cut = int(np.searchsorted(cumulative, top_p)) + 1
    return order[: max(1, min(cut, order.size))]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-probabilities of float logits (the same arithmetic as the sign-off's scoring)."""
    logits = logits.astype(np.float64, copy=False)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def logprobs_of(logits: np.ndarray, token: int, top: int) -> Logprobs:
    """`token`'s log-probability under `logits` (vocab,), and the `top` most likely tokens' (ties: lower id first)."""
    logp = log_softmax(logits)
    top = min(top, logp.size)
    best: list[tuple[int, float]] = []
    if top:
        head = np.argpartition(-logp, top - 1)[:top]
        order = head[np.lexsort((head, -logp[head]))]
        best = [(int(i), float(logp[i])) for i in order]
    return Logprobs(token=int(token), logprob=float(logp[token]), top=tuple(best))


class SampledLogprobs:
    """For engines: sample through `_pick`, and the log-probabilities of what a sequence sampled last are kept
    for `take_logprobs` when its `Sampling` asks for them (the `LogprobsEngine` protocol)."""

    _sampled: dict[int, Logprobs]

    def _init_logprobs(self) -> None:
        self._sampled = {}

    def _pick(self, seq: int, logits: np.ndarray, sampling: Sampling, rng: np.random.Generator) -> int:
        token = sample(logits, sampling, rng)
        if sampling.logprobs is not None:
            self._sampled[seq] = logprobs_of(logits, token, sampling.logprobs)
        return token

    def take_logprobs(self, seq: int) -> Logprobs | None:
        return self._sampled.pop(seq, None)
