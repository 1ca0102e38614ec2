"""Accuracy metrics and their uncertainty. Pure numpy.

Per-token quantities come from comparing a candidate's logits with the stored reference:
- nll: negative log-likelihood of the actual next token (perplexity = exp(mean nll));
- kld: KL(reference || candidate): exact over the reference's top-k tokens, plus an unbiased estimate
  of the rest from tokens sampled out of the reference's tail (see `compare`); `tail_mass` reports
  how much probability the reference puts outside its top k;
- kld_coarse: KL between the two distributions coarse-grained to the reference's top-k tokens and one
  bucket for the rest: exact per token (no sampling) and never above the full KL (coarse-graining cannot
  increase a KL divergence), so its quantiles are exact statements about a lower bound;
- top1: whether candidate and reference pick the same most likely token (`top1_ids`: the candidate's);
- dp: p_candidate(next token) − p_reference(next token).

Intervals are percentile intervals (95% unless a sequential evaluation asks for a wider level) from a
block bootstrap: the scored tokens are cut into contiguous blocks (default 64 tokens) and blocks are
resampled with replacement, so correlation between neighbouring tokens widens the interval instead of
being ignored. Paired statistics (perplexity ratio, task accuracy drop) resample the same blocks for both
sides.

The per-token KLD from the sampled tail is unbiased, so its mean (and the mean's interval) is right; but
each token's value carries the noise of its 64 samples, which spreads the distribution: its median, p99
and max are inflated estimates, and the bootstrap interval does not cover that noise. They are reported
with their estimator and never gated; `kld_p99_max` gates the p99 of the exact `kld_coarse`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

EPS = 1e-10
LEVEL = 0.95
ESTIMATORS = {
    "kld_mean": "exact over the reference's top-k tokens + an unbiased estimate of the rest from sampled tail "
    "tokens; the interval covers that sampling",
    "kld_quantile": "quantile of per-token estimates (exact top-k + sampled tail): each token's value carries "
    "its tail-sampling noise, which inflates upper quantiles; the interval does not cover it; not gated",
    "kld_coarse": "exact per token: KL over the reference's top-k tokens and one bucket for the rest, a lower "
    "bound of the full KL; its interval covers all of its uncertainty",
}


def log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = logits.astype(np.float64, copy=False)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@dataclass
class ReferenceSlice:
    """Reference values at scored positions (n tokens)."""

    topk_ids: np.ndarray  # (n, k) int32, most likely first
    topk_logp: np.ndarray  # (n, k) float32
    tail_ids: np.ndarray  # (n, s) int32, drawn from the reference restricted to outside its top k
    tail_logp: np.ndarray  # (n, s) float32
    target_logp: np.ndarray  # (n,) float32, log p(actual next token)


def reference_slice(
    logits: np.ndarray, targets: np.ndarray, k: int, samples: int, rng: np.random.Generator
) -> ReferenceSlice:
    logp = log_softmax(logits)
    n, vocab = logp.shape
    k = min(k, vocab - 1)
    top = np.argpartition(-logp, k - 1, axis=-1)[:, :k]
    top_logp = np.take_along_axis(logp, top, axis=-1)
    order = np.argsort(-top_logp, axis=-1, kind="stable")
    top = np.take_along_axis(top, order, axis=-1)
    top_logp = np.take_along_axis(top_logp, order, axis=-1)
    target = np.take_along_axis(logp, targets[:, None].astype(np.int64), axis=-1)[:, 0]
    # Draw `samples` tokens per position from the reference's distribution outside its top k.
    tail = np.exp(logp)
    np.put_along_axis(tail, top, 0.0, axis=-1)
    cdf = np.cumsum(tail, axis=-1)
    u = rng.random((n, samples)) * cdf[:, -1:]
    tail_ids = np.empty((n, samples), dtype=np.int64)
    for row in range(n):
        tail_ids[row] = np.minimum(np.searchsorted(cdf[row], u[row], side="right"), vocab - 1)
    tail_logp = np.take_along_axis(logp, tail_ids, axis=-1)
    return ReferenceSlice(
        top.astype(np.int32),
        top_logp.astype(np.float32),
        tail_ids.astype(np.int32),
        tail_logp.astype(np.float32),
        target.astype(np.float32),
    )


@dataclass
class TokenComparison:
    nll_ref: np.ndarray
    nll: np.ndarray
    kld: np.ndarray
    top1: np.ndarray  # bool
    dp: np.ndarray
    tail_mass: np.ndarray  # reference mass outside its top-k
    kld_coarse: np.ndarray  # exact KL of the top-k + rest coarse-graining (≤ kld's expectation)
    top1_ids: np.ndarray  # the candidate's most likely token at each position


def compare(ref: ReferenceSlice, logits: np.ndarray, targets: np.ndarray) -> TokenComparison:
    """Compare candidate logits (n, vocab) at the scored positions with the reference.

    KL(P‖Q) = Σ_top p (log p − log q) + Σ_tail p (log p − log q). The first sum is exact. The second
    is p_tail · E[log p − log q] over tokens drawn from P restricted to its tail, estimated from the
    stored samples: unbiased, so the mean KLD over many tokens is right even where the tail is heavy
    (small models often leave 10% of the mass outside the top 64).
    """
    vocab = logits.shape[-1]
    if int(ref.topk_ids.max(initial=0)) >= vocab or int(ref.tail_ids.max(initial=0)) >= vocab:
        raise ValueError(f"reference token ids exceed the candidate vocabulary ({vocab})")
    q = log_softmax(logits)
    p_top = ref.topk_logp.astype(np.float64)
    q_top = np.take_along_axis(q, ref.topk_ids.astype(np.int64), axis=-1)
    p_tail = np.clip(1.0 - np.exp(p_top).sum(-1), 0.0, 1.0)
    kld = (np.exp(p_top) * (p_top - q_top)).sum(-1)
    if ref.tail_ids.shape[1]:
        q_tail = np.take_along_axis(q, ref.tail_ids.astype(np.int64), axis=-1)
        kld += p_tail * (ref.tail_logp.astype(np.float64) - q_tail).mean(-1)
    q_target = np.take_along_axis(q, targets[:, None].astype(np.int64), axis=-1)[:, 0]
    top1_ids = q.argmax(-1)
    return TokenComparison(
        nll_ref=-ref.target_logp.astype(np.float64),
        nll=-q_target,
        kld=kld,
        top1=top1_ids == ref.topk_ids[:, 0],
        dp=np.exp(q_target) - np.exp(ref.target_logp.astype(np.float64)),
        tail_mass=p_tail,
        kld_coarse=coarse_kl(p_top, q_top, p_tail),
        top1_ids=top1_ids.astype(np.int32),
    )


def coarse_kl(p_top: np.ndarray, q_top: np.ndarray, p_tail: np.ndarray) -> np.ndarray:
    """KL between P and Q merged to the top-k tokens of P plus one 'rest' bucket: exact, and ≤ KL(P‖Q)."""
    top = (np.exp(p_top) * (p_top - q_top)).sum(-1)
    q_tail = np.clip(1.0 - np.exp(q_top).sum(-1), EPS, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = np.where(p_tail > 0, p_tail * (np.log(np.maximum(p_tail, EPS)) - np.log(q_tail)), 0.0)
    return np.maximum(top + rest, 0.0)


def concat(parts: list[TokenComparison]) -> TokenComparison:
    return TokenComparison(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in asdict(parts[0])})


# --- intervals ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float | None
    high: float | None
    n: int  # sample size: tokens or items
    unit: str = "tokens"
    level: float = LEVEL  # coverage of [low, high]
    estimator: str | None = None  # how a figure whose computation matters was computed

    def to_dict(self) -> dict[str, Any]:
        # "ci95" is the interval the gates judge; its coverage is `level` when that is not 95%.
        out = {"value": self.value, "ci95": [self.low, self.high], "n": self.n, "unit": self.unit}
        if self.level != LEVEL:
            out["level"] = self.level
        if self.estimator:
            out["estimator"] = self.estimator
        return out


def percentiles(level: float) -> list[float]:
    return [100 * (1 - level) / 2, 100 * (1 + level) / 2]


class BlockBootstrap:
    """Resample contiguous blocks of a sequence; the same draws serve every statistic of one artifact."""

    def __init__(self, n: int, block: int, resamples: int, seed: int, level: float = LEVEL) -> None:
        if n < 1:
            raise ValueError("a block bootstrap needs at least one scored token")
        self.n = n
        self.level = level
        self.block = max(1, min(block, n))
        self.n_blocks = int(np.ceil(n / self.block))
        rng = np.random.default_rng(seed)
        self.draws = rng.integers(0, self.n_blocks, size=(resamples, self.n_blocks))

    def _block_sums(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        edges = np.arange(0, self.n, self.block)
        sums = np.add.reduceat(x.astype(np.float64), edges)
        counts = np.diff(np.append(edges, self.n)).astype(np.float64)
        return sums, counts

    def mean(self, x: np.ndarray, transform: Callable[[np.ndarray], np.ndarray] | None = None) -> Estimate:
        sums, counts = self._block_sums(x)
        boot = sums[self.draws].sum(1) / counts[self.draws].sum(1)
        value = float(x.mean())
        if transform is not None:
            boot, value = transform(boot), float(transform(np.array([value]))[0])
        low, high = np.percentile(boot, percentiles(self.level))
        return Estimate(value, float(low), float(high), self.n, level=self.level)

    def quantile(self, x: np.ndarray, q: float, max_batch_elems: int = 20_000_000) -> Estimate:
        blocks = [x[i : i + self.block] for i in range(0, self.n, self.block)]
        padded = np.full((self.n_blocks, self.block), np.nan)
        for i, b in enumerate(blocks):
            padded[i, : len(b)] = b
        values = []
        step = max(1, max_batch_elems // max(1, self.n_blocks * self.block))
        for start in range(0, len(self.draws), step):
            sample = padded[self.draws[start : start + step]].reshape(len(self.draws[start : start + step]), -1)
            values.append(np.nanquantile(sample, q, axis=1))
        boot = np.concatenate(values)
        low, high = np.percentile(boot, percentiles(self.level))
        return Estimate(float(np.quantile(x, q)), float(low), float(high), self.n, level=self.level)


def item_bootstrap(
    correct_ref: np.ndarray, correct: np.ndarray, resamples: int, seed: int, level: float = LEVEL
) -> dict[str, Estimate]:
    """Accuracy of reference and candidate on the same items, and the paired drop (ref − candidate)."""
    n = len(correct)
    if n == 0:
        empty = Estimate(float("nan"), None, None, 0, "items", level)
        return {"reference": empty, "candidate": empty, "drop": empty}
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    a, b = correct_ref.astype(np.float64), correct.astype(np.float64)
    boot_a, boot_b = a[draws].mean(1), b[draws].mean(1)

    def est(value: float, boot: np.ndarray) -> Estimate:
        low, high = np.percentile(boot, percentiles(level))
        return Estimate(value, float(low), float(high), n, "items", level)

    return {
        "reference": est(float(a.mean()), boot_a),
        "candidate": est(float(b.mean()), boot_b),
        "drop": est(float(a.mean() - b.mean()), boot_a - boot_b),
    }


def token_metrics(
    cmp: TokenComparison, block: int, resamples: int, seed: int, level: float = LEVEL
) -> dict[str, Estimate]:
    boot = BlockBootstrap(len(cmp.kld), block, resamples, seed, level)
    diff = cmp.nll - cmp.nll_ref
    n = len(cmp.kld)
    estimated = ESTIMATORS["kld_quantile"]
    return {
        "ppl_reference": boot.mean(cmp.nll_ref, np.exp),
        "ppl": boot.mean(cmp.nll, np.exp),
        "ppl_ratio": boot.mean(diff, np.exp),
        "kld_mean": replace(boot.mean(cmp.kld), estimator=ESTIMATORS["kld_mean"]),
        "kld_median": replace(boot.quantile(cmp.kld, 0.5), estimator=estimated),
        "kld_p99": replace(boot.quantile(cmp.kld, 0.99), estimator=estimated),
        "kld_max": Estimate(float(cmp.kld.max()), None, None, n, level=level, estimator=estimated),
        "kld_coarse_mean": replace(boot.mean(cmp.kld_coarse), estimator=ESTIMATORS["kld_coarse"]),
        "kld_coarse_p99": replace(boot.quantile(cmp.kld_coarse, 0.99), estimator=ESTIMATORS["kld_coarse"]),
        "top1": boot.mean(cmp.top1.astype(np.float64)),
        "dp_rms": boot.mean(cmp.dp**2, np.sqrt),
        "tail_mass_mean": Estimate(float(cmp.tail_mass.mean()), None, None, n, level=level),
    }
