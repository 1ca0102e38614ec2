"""The llama.cpp engine on a tiny random-weight GGUF: batched decode, KV slots, logits, limits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _tiny_gguf import write_tiny_gguf

from edgekit.backends.gguf.engine import GGUFEngine
from edgekit.errors import UsageError
from edgekit.runtime.engines.base import Sampling
from edgekit.runtime.engines.sampling import sample


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture
def engine(tiny_model: Path) -> GGUFEngine:
    e = GGUFEngine(tiny_model, n_threads=1, n_threads_batch=1, n_ctx=256, n_batch=16, max_sequences=4)
    yield e
    e.close()


def greedy_run(engine: GGUFEngine, prompt: list[int], n: int) -> list[int]:
    out = [engine.start(0, prompt, Sampling())]
    out += [engine.step()[0] for _ in range(n - 1)]
    engine.finish(0)
    return out


def test_tokenizer_round_trip_and_specials(engine: GGUFEngine) -> None:
    ids = engine.tokenize("the héllo")
    assert engine.detokenize(ids) == "the héllo".encode()
    assert engine.tokenize("<|im_start|>", special=True) == [1]
    assert engine.eos_ids == frozenset({0, 2}) and engine.chat_template.startswith("{% for m in messages")
    assert engine.token_text(2) == "<|im_end|>"


def test_batched_decode_matches_one_sequence_at_a_time(engine: GGUFEngine) -> None:
    prompts = [engine.tokenize(t) for t in ("the cat sat on", "a long prompt " * 3, "x")]  # 40 tokens > n_batch
    alone = [greedy_run(engine, p, 6) for p in prompts]
    firsts = {seq: engine.start(seq, p, Sampling()) for seq, p in enumerate(prompts)}
    together = {seq: [tok] for seq, tok in firsts.items()}
    for _ in range(5):
        step = engine.step()
        assert sorted(step) == [0, 1, 2]
        for seq, tok in step.items():
            together[seq].append(tok)
    assert [together[s] for s in range(3)] == alone


def test_finish_frees_the_slot_for_a_new_sequence(engine: GGUFEngine) -> None:
    prompt = engine.tokenize("the quick brown fox")
    first = greedy_run(engine, prompt, 4)
    engine.start(1, engine.tokenize("something else entirely"), Sampling())
    engine.step()
    engine.finish(1)
    assert engine.active == []
    assert greedy_run(engine, prompt, 4) == first  # no stale KV cells from the finished sequences


def test_logits_match_the_greedy_choice_and_need_an_idle_engine(engine: GGUFEngine) -> None:
    ids = engine.tokenize("the end of the")
    logits = engine.logits(ids)
    assert logits.shape == (len(ids), engine.n_vocab) and logits.dtype == np.float32
    assert int(np.argmax(logits[-1])) == greedy_run(engine, ids, 1)[0]
    engine.start(0, ids, Sampling())
    with pytest.raises(UsageError, match="idle"):
        engine.logits(ids)


def test_limits_are_typed_errors(engine: GGUFEngine) -> None:
    with pytest.raises(UsageError, match="out of range"):
        engine.start(4, [5], Sampling())
    with pytest.raises(UsageError, match="empty prompt"):
        engine.start(0, [], Sampling())
    with pytest.raises(UsageError, match="does not fit"):
        engine.start(0, [5] * engine.n_ctx, Sampling())
    engine.start(0, [5], Sampling())
    with pytest.raises(UsageError, match="is active"):
        engine.start(0, [5], Sampling())


def test_sampling_is_seeded_and_top_p_keeps_the_nucleus() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    greedy = Sampling()
    assert sample(logits, greedy, np.random.default_rng(0)) == 0
    nucleus = Sampling(temperature=1.0, top_p=0.7, seed=1)
    draws = {sample(logits, nucleus, np.random.default_rng(i)) for i in range(200)}
    assert draws == {0, 1}  # 0.5 + 0.3 ≥ 0.7: tokens 2 and 3 are never drawn
    seeded = [sample(logits, Sampling(temperature=1.0, seed=7), np.random.default_rng(7)) for _ in range(3)]
    assert len(set(seeded)) == 1
