"""The llama.cpp engine on a tiny random-weight GGUF: batched decode, KV slots, logits, limits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgekit.backends.gguf.engine import GGUFEngine
from edgekit.errors import UsageError
from edgekit.runtime.engines.base import Sampling
from edgekit.runtime.engines.prefix import Reuse, common_prefix
from edgekit.runtime.engines.sampling import sample
from tests.support.tiny_gguf import write_tiny_gguf


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


def prefill_served(engine: GGUFEngine, seq: int, prompt: list[int], budget: int = 16) -> tuple[Reuse, np.ndarray]:
    """Admit a prompt as `serve` does and advance until its first token; its last prompt token's logits."""
    reuse = engine.admit(seq, prompt, Sampling())
    while seq not in engine.advance(budget):
        pass
    return reuse, engine._logits_row(-1).copy()  # llama.cpp keeps the last batch's logits until the next decode


def test_a_prefix_hit_gives_the_logits_of_a_cold_prefill(tiny_model: Path) -> None:
    engine = GGUFEngine(tiny_model, n_threads=1, n_threads_batch=1, n_ctx=256, n_batch=64, max_sequences=2,
                        prefix_cache=2)  # fmt: skip
    system = engine.tokenize("You are a helpful assistant for the water pump station. " * 2)
    first, second = system + engine.tokenize(" the cat"), system + engine.tokenize(" a dog sat")
    shared = common_prefix(first, second)
    cold = engine.logits(second)[-1]
    prefill_served(engine, 0, first)
    engine.finish(0)
    assert engine.pick_slot([0, 1], second) == 0
    reuse, hit = prefill_served(engine, 0, second)
    assert reuse == Reuse(shared, "slot")
    # llama.cpp's results depend slightly on how tokens are batched (f16 KV cache): equal up to that rounding
    np.testing.assert_allclose(hit, cold, rtol=0, atol=2e-3 * float(np.abs(cold).max()))
    assert int(np.argmax(hit)) == int(np.argmax(cold))
    engine.finish(0)
    # the same prompt again reuses all but its last token
    assert prefill_served(engine, 0, second)[0] == Reuse(len(second) - 1, "slot")
    engine.finish(0)
    # another long prompt repurposes the slot; the first comes back from the store, into another stream
    other = engine.tokenize("Completely unrelated text about the mountains and rivers of the north. " * 2)
    assert prefill_served(engine, 0, other)[0] == Reuse(0, "")
    engine.finish(0)
    assert engine.prefix_entries == 1
    reuse, restored = prefill_served(engine, 1, second)
    assert reuse == Reuse(len(second) - 1, "store")
    np.testing.assert_allclose(restored, cold, rtol=0, atol=2e-3 * float(np.abs(cold).max()))
    engine.finish(1)
    # cold paths never see kept cells: logits() and start() give what a fresh engine gives
    assert np.array_equal(engine.logits(second)[-1], cold)
    assert greedy_run(engine, second, 3) == greedy_run(engine, second, 3)
    engine.close()


def test_chunked_prefill_interleaves_with_decoding_and_changes_no_token(engine: GGUFEngine) -> None:
    short, long_prompt = engine.tokenize("the cat sat"), engine.tokenize("a long prompt about many things " * 4)
    expected = {0: greedy_run(engine, short, 24), 1: greedy_run(engine, long_prompt, 3)}
    engine.admit(0, short, Sampling())
    got: dict[int, list[int]] = {0: [], 1: []}
    for seq, token in engine.advance(64).items():
        got[seq].append(token)
    engine.admit(1, long_prompt, Sampling())
    chunks = -(-len(long_prompt) // 8)
    for _ in range(chunks):
        for seq, token in engine.advance(8).items():
            got[seq].append(token)
    assert len(got[0]) == 1 + chunks and len(got[1]) == 1  # sequence 0 advanced at every chunk
    while len(got[1]) < 3:
        for seq, token in engine.advance(8).items():
            got[seq].append(token)
    assert got[0] == expected[0][: len(got[0])] and got[1] == expected[1]
    assert engine.active == [0, 1]
