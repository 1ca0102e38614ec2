"""The compute roof: one rate per GGUF weight type, measured with llama.cpp's own kernels."""

from __future__ import annotations

import pytest

from edgekit.runtime.bench.compute import compute_roof, measurable, probe


def test_each_weight_type_gets_its_own_kernel_rate() -> None:
    rates = probe(threads=1, runs=1, types=("F16", "Q8_0", "Q4_K", "Q6_K", "IQ2_XXS", "NOT_A_TYPE"), seconds=0.02)
    assert set(rates) == {"F16", "Q8_0", "Q4_K", "Q6_K"}  # IQ2_XXS needs an imatrix to quantize
    assert all(r["median"] > 0 and r["n"] == 1 for r in rates.values())
    assert not measurable("IQ2_XXS") and not measurable("NOT_A_TYPE") and measurable("Q4_0")


def test_the_roof_weighs_each_type_by_its_own_rate() -> None:
    ops = {"Q4_K": 8 * 10**9, "Q6_K": 2 * 10**9}
    assert compute_roof(ops, {"Q4_K": 100.0, "Q6_K": 50.0}) == pytest.approx(1 / (8 / 100 + 2 / 50))
    assert compute_roof(ops, {"Q4_K": 100.0}) is None  # a type the probe could not time: no roof, not a guess
    assert compute_roof({}, {"Q4_K": 100.0}) is None
