"""Token sampling in numpy: greedy, temperature and nucleus (top-p). Shared by every engine."""

from __future__ import annotations

import numpy as np

from edgekit.runtime.engines.base import Sampling

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
