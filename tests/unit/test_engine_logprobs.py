"""Every engine path that samples reports the sampled token's log-probabilities when asked: the log-softmax
(the sign-off's `log_softmax`) of the logits `logits()` gives for the same tokens. On the real llama.cpp engine
(the tiny GGUF) and on the stepwise engine that OpenVINO and ONNX Runtime share (its toy numpy model)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgekit.backends.gguf.engine import GGUFEngine
from edgekit.runtime.engines.base import LogprobsEngine, Sampling
from edgekit.signoff.metrics import log_softmax
from tests.support.tiny_gguf import write_tiny_gguf
from tests.unit.test_stepwise_engines import ToyEngine

TOP = 3
PROMPT = [5, 9, 3, 8, 2]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def gguf(model: Path) -> GGUFEngine:
    return GGUFEngine(model, n_threads=1, n_threads_batch=1, n_ctx=128, n_batch=4, max_sequences=2)


def toy(model: Path) -> ToyEngine:
    return ToyEngine(n_batch=2, prefix_cache=2)


@pytest.fixture(params=[gguf, toy], ids=["gguf", "stepwise"])
def engine(request: pytest.FixtureRequest, model: Path) -> Iterator[Any]:
    factory: Callable[[Path], Any] = request.param
    e = factory(model)
    yield e
    if isinstance(e, GGUFEngine):
        e.close()


def assert_scored(engine: Any, steps: list[tuple[list[int], int, Any]]) -> None:
    """Each (prefix, sampled token, its reported Logprobs) against the scored log-softmax of logits(prefix)."""
    for prefix, token, sampled in steps:
        logp = log_softmax(engine.logits(prefix)[-1])
        assert sampled is not None and sampled.token == token and abs(sampled.logprob - logp[token]) <= 1e-4
        assert np.allclose([v for _, v in sampled.top], np.sort(logp)[::-1][:TOP], atol=1e-4)
        assert all(abs(logp[t] - v) <= 1e-4 for t, v in sampled.top)


def test_start_and_step_report_the_scored_log_softmax(engine: Any) -> None:
    assert isinstance(engine, LogprobsEngine)
    token = engine.start(0, PROMPT, Sampling(logprobs=TOP))
    steps = [(list(PROMPT), token, engine.take_logprobs(0))]
    assert engine.take_logprobs(0) is None  # taken once
    ids = [*PROMPT, token]
    for _ in range(3):
        token = engine.step()[0]
        steps.append((list(ids), token, engine.take_logprobs(0)))
        ids.append(token)
    engine.finish(0)
    assert_scored(engine, steps)


def test_served_prefill_and_decode_report_the_scored_log_softmax(engine: Any) -> None:
    sampling = Sampling(temperature=0.8, seed=1, logprobs=TOP)  # sampled, yet reported unscaled
    engine.admit(0, PROMPT, sampling)
    ids, token = list(PROMPT), None
    while token is None:
        token = engine.advance(2).get(0)
    scored = [(list(ids), token, engine.take_logprobs(0))]
    ids.append(token)
    for _ in range(3):
        token = engine.advance(2)[0]
        scored.append((list(ids), token, engine.take_logprobs(0)))
        ids.append(token)
    engine.finish(0)
    assert_scored(engine, scored)


def test_nothing_is_kept_when_logprobs_are_not_asked_for(engine: Any) -> None:
    engine.start(0, PROMPT, Sampling())
    engine.step()
    assert engine.take_logprobs(0) is None
