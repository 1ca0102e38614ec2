"""The install's smoke test judges log-probabilities of the recorded tokens, within a tolerance from the noise
floor; greedy ids are a report. On the real llama.cpp engine with tiny GGUFs (another seed stands for another
model file). The whole install path, with a swapped quantization of the real model: tests/e2e/test_ship.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgekit.backends.gguf.engine import GGUFEngine
from edgekit.runtime.smoke import DEFAULT, FLOOR, Tolerance, record, replay
from tests.support.tiny_gguf import write_tiny_gguf

PROMPTS = ("The capital of France is", "def f(n):\n    ")


def engine(path: Path) -> GGUFEngine:
    return GGUFEngine(path, n_threads=1, n_threads_batch=1, n_ctx=128, n_batch=8, max_sequences=1)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("smoke")
    return {name: write_tiny_gguf(root / f"{name}.gguf", seed=seed) for name, seed in (("built", 0), ("other", 1))}


@pytest.fixture(scope="module")
def recorded(models: dict[str, Path]) -> Iterator[list[dict[str, object]]]:
    e = engine(models["built"])
    try:
        yield record(e, PROMPTS, 8)
    finally:
        e.close()


def test_the_record_holds_each_continuation_tokens_log_probability(recorded: list[dict[str, object]]) -> None:
    for item in recorded:
        greedy, logprobs = item["greedy_ids"], item["logprobs"]
        assert isinstance(greedy, list) and isinstance(logprobs, list)
        assert len(logprobs) == len(greedy) == 8 and all(v < 0 for v in logprobs)


def test_the_same_file_on_the_same_runtime_is_zero_nats_away(models: dict[str, Path], recorded: list) -> None:
    e = engine(models["built"])
    try:
        result = replay(e, recorded, Tolerance(*FLOOR, "the floor"))
    finally:
        e.close()
    assert result["status"] == "match" and result["differences"] == [] and result["greedy_ids_same"]
    assert result["logprob_distance"]["max_abs"] <= 1e-5


def test_another_model_file_is_refused_by_its_log_probabilities(models: dict[str, Path], recorded: list) -> None:
    e = engine(models["other"])
    try:
        result = replay(e, recorded, Tolerance.default())
    finally:
        e.close()
    assert result["status"] == "mismatch"
    (difference,) = result["differences"]
    assert difference["what"] == "log-probabilities" and difference["got"]["max_abs"] > DEFAULT[1]


def test_a_greedy_sequence_that_parts_is_reported_not_judged(models: dict[str, Path], recorded: list) -> None:
    """The recorded tokens' log-probabilities move by less than the tolerance, yet the last greedy id differs
    (as on a box whose kernels tip a near-tie): a match, with `greedy_ids_same` false."""
    e = engine(models["built"])
    try:
        item = dict(recorded[0])
        greedy = list(item["greedy_ids"])
        here = e.logits([*item["prompt_ids"], *greedy[:-1]])[-1]
        runner_up = int(np.argsort(here)[-2])
        item["greedy_ids"] = [*greedy[:-1], runner_up]
        item["logprobs"] = [*item["logprobs"][:-1], float(here[runner_up] - np.logaddexp.reduce(here))]
        result = replay(e, [item], Tolerance(*FLOOR, "the floor"))
    finally:
        e.close()
    assert result["status"] == "match" and not result["greedy_ids_same"]


def test_a_record_without_log_probabilities_is_judged_by_its_greedy_ids(models: dict[str, Path], recorded: list
                                                                         ) -> None:  # fmt: skip
    old = [{k: v for k, v in item.items() if k != "logprobs"} for item in recorded]
    old[0]["greedy_ids"] = [*old[0]["greedy_ids"][:-1], (old[0]["greedy_ids"][-1] + 1) % 200]
    e = engine(models["built"])
    try:
        result = replay(e, old, Tolerance.default())
    finally:
        e.close()
    assert result["status"] == "mismatch" and result["logprob_distance"] is None
    assert [d["what"] for d in result["differences"]] == ["greedy ids"]


def test_the_tolerance_is_three_times_the_noise_floors_movement_and_never_below_the_floor() -> None:
    rng = np.random.default_rng(0)
    nll_ref = rng.uniform(0, 8, 10_000)
    moved = rng.exponential(0.02, 10_000)
    tolerance = Tolerance.from_noise_floor(nll_ref + moved, nll_ref, "bfloat16")
    assert tolerance.mean_abs == pytest.approx(3 * moved.mean(), rel=1e-4)
    assert tolerance.max_abs == pytest.approx(3 * np.quantile(moved, 0.99), rel=1e-4)
    assert tolerance.source.startswith("3 × the noise floor (bfloat16 reference against float32, 10000 tokens")
    still = Tolerance.from_noise_floor(nll_ref, nll_ref, "bfloat16")
    assert (still.mean_abs, still.max_abs) == FLOOR
    assert (
        Tolerance.of(None) == Tolerance.default()
        and (Tolerance.default().mean_abs, Tolerance.default().max_abs) == DEFAULT
    )
