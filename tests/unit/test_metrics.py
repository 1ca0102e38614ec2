from __future__ import annotations

import numpy as np
import pytest

from edgekit.signoff.gates import judge
from edgekit.signoff.metrics import (
    BlockBootstrap,
    Estimate,
    compare,
    item_bootstrap,
    log_softmax,
    reference_slice,
    token_metrics,
)


def heavy_tailed_logits(n: int, vocab: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(0, 1.5, size=(n, vocab)).astype(np.float32)


def exact_kl(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    p, q = log_softmax(p_logits), log_softmax(q_logits)
    return (np.exp(p) * (p - q)).sum(-1)


def test_identical_logits_give_zero_divergence_and_full_agreement() -> None:
    logits = heavy_tailed_logits(50, 500, 0)
    targets = np.arange(50) % 500
    ref = reference_slice(logits, targets, 16, 16, np.random.default_rng(0))
    cmp = compare(ref, logits, targets)
    assert np.allclose(cmp.kld, 0, atol=1e-6)
    assert cmp.top1.all() and np.allclose(cmp.nll, cmp.nll_ref, atol=1e-5)


def test_kl_estimate_is_unbiased_where_the_tail_is_heavy() -> None:
    """Most of the mass is outside the top 16 here; the sampled tail keeps the mean right."""
    p = heavy_tailed_logits(2000, 1000, 1)
    q = p + np.random.default_rng(2).normal(0, 0.3, size=p.shape).astype(np.float32)
    targets = np.zeros(len(p), dtype=np.int64)
    exact = exact_kl(p, q).mean()
    with_samples = compare(reference_slice(p, targets, 16, 64, np.random.default_rng(3)), q, targets)
    top_only = compare(reference_slice(p, targets, 16, 0, np.random.default_rng(3)), q, targets)
    assert with_samples.tail_mass.mean() > 0.5
    assert with_samples.kld.mean() == pytest.approx(exact, rel=0.03)
    assert top_only.kld.mean() < 0.8 * exact  # what the samples are for


def test_block_bootstrap_interval_contains_the_mean_and_widens_with_correlation() -> None:
    rng = np.random.default_rng(0)
    independent = rng.normal(size=4096)
    correlated = np.repeat(rng.normal(size=64), 64)
    a = BlockBootstrap(4096, 64, 500, 0).mean(independent)
    b = BlockBootstrap(4096, 64, 500, 0).mean(correlated)
    assert a.low < a.value < a.high
    assert (b.high - b.low) > 3 * (a.high - a.low)


def test_token_metrics_have_intervals_and_sample_sizes() -> None:
    p = heavy_tailed_logits(300, 200, 4)
    q = p * 0.9
    targets = np.random.default_rng(5).integers(0, 200, size=300)
    metrics = token_metrics(
        compare(reference_slice(p, targets, 8, 8, np.random.default_rng(6)), q, targets), 32, 200, 0
    )
    for key in ("ppl", "ppl_ratio", "kld_mean", "kld_median", "kld_p99", "top1", "dp_rms"):
        est = metrics[key]
        assert est.n == 300 and est.low is not None and est.low <= est.value <= est.high, key


def test_judge_pass_fail_inconclusive() -> None:
    assert judge(Estimate(0.01, 0.008, 0.012, 100), 0.02, "max") == "pass"
    assert judge(Estimate(0.03, 0.025, 0.035, 100), 0.02, "max") == "fail"
    assert judge(Estimate(0.02, 0.015, 0.025, 100), 0.02, "max") == "inconclusive"
    assert judge(Estimate(0.95, 0.94, 0.96, 100), 0.9, "min") == "pass"
    assert judge(Estimate(0.85, 0.84, 0.86, 100), 0.9, "min") == "fail"
    assert judge(Estimate(0.9, 0.88, 0.92, 100), 0.9, "min") == "inconclusive"


def test_item_bootstrap_paired_drop() -> None:
    ref = np.array([True] * 80 + [False] * 20)
    cand = ref.copy()
    cand[:10] = False
    result = item_bootstrap(ref, cand, 500, 0)
    assert result["drop"].value == pytest.approx(0.1)
    assert result["drop"].low > 0  # paired: the ten flips are a real drop
