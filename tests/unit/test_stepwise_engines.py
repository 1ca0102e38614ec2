"""The parts of the OpenVINO and ONNX Runtime engines that need no model: sequence bookkeeping and chunked
prefill (on a toy numpy engine), the Hugging Face side files, token → bytes tables, runtime properties."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from edgekit.errors import UsageError
from edgekit.runtime.config import RuntimeConfig, render_runtime_toml
from edgekit.runtime.engines.base import Sampling
from edgekit.runtime.engines.hf_files import HFFiles, token_bytes_table
from edgekit.runtime.engines.prefix import Reuse
from edgekit.runtime.engines.stepwise import StepwiseEngine

VOCAB = 11


class ToyEngine(StepwiseEngine):
    """A 'model' whose next token is (sum of every token in its KV state) mod VOCAB; records each call."""

    backend = "toy"

    prefix_reuse = True

    def __init__(
        self, n_batch: int, first_chunk: int = 0, max_sequences: int = 2, n_ctx: int = 64, prefix_cache: int = 0
    ) -> None:
        self.first_chunk = first_chunk
        self.n_vocab = VOCAB
        self._init_sequences(max_sequences, n_ctx, n_batch, prefix_cache)
        self.calls: list[tuple[int, int]] = []  # (position, tokens) per run

    def _new_slot(self) -> list[int]:
        return []

    def _reset(self, slot: list[int]) -> None:
        slot.clear()

    def _truncate(self, slot: list[int], n: int) -> None:
        del slot[n:]

    def _snapshot(self, slot: list[int]) -> list[int]:
        return list(slot)

    def _restore(self, slot: list[int], state: list[int]) -> None:
        slot[:] = state

    def _run(self, slot: list[int], ids: Sequence[int], pos: int) -> np.ndarray:
        assert pos == len(slot), "fed at the wrong position"
        self.calls.append((pos, len(ids)))
        out = np.zeros((len(ids), VOCAB), dtype=np.float32)
        for i, token in enumerate(ids):
            slot.append(token)
            out[i, sum(slot) % VOCAB] = 1.0
        return out


def test_logits_are_the_same_whatever_the_chunking() -> None:
    ids = list(range(1, 24))
    reference = ToyEngine(n_batch=1000).logits(ids)
    for n_batch, first in ((5, 0), (5, 1), (1, 0), (7, 1)):
        engine = ToyEngine(n_batch=n_batch, first_chunk=first)
        assert np.array_equal(engine.logits(ids), reference)
    engine = ToyEngine(n_batch=8, first_chunk=1)
    engine.logits(ids)
    assert engine.calls == [(0, 1), (1, 8), (9, 8), (17, 6)]  # the first token alone, then n_batch chunks


def test_greedy_generation_follows_the_logits_and_sequences_are_independent() -> None:
    engine = ToyEngine(n_batch=4, first_chunk=1)
    prompt = [3, 1, 4, 1, 5]
    first = engine.start(0, prompt, Sampling())
    assert first == int(engine.logits(prompt)[-1].argmax())  # logits() does not disturb sequence 0
    other = engine.start(1, [2, 7], Sampling())
    generated = {0: [first], 1: [other]}
    for _ in range(4):
        for seq, token in engine.step().items():
            generated[seq].append(token)
    # a fresh engine running sequence 0 alone gives the same tokens
    alone = ToyEngine(n_batch=4, first_chunk=1)
    tokens = [alone.start(0, prompt, Sampling())] + [alone.step()[0] for _ in range(4)]
    assert tokens == generated[0]
    engine.finish(0)
    assert engine.active == [1] and list(engine.step()) == [1]
    assert engine.start(0, prompt, Sampling()) == first  # a reused slot starts from an empty state


def test_limits_are_usage_errors() -> None:
    engine = ToyEngine(n_batch=4, n_ctx=8)
    with pytest.raises(UsageError, match="out of range"):
        engine.start(2, [1], Sampling())
    with pytest.raises(UsageError, match="empty prompt"):
        engine.start(0, [], Sampling())
    with pytest.raises(UsageError, match="does not fit"):
        engine.start(0, list(range(8)), Sampling())
    engine.start(0, [1], Sampling())
    with pytest.raises(UsageError, match="is active"):
        engine.start(0, [1], Sampling())
    for _ in range(7):
        engine.step()
    with pytest.raises(UsageError, match="filled its context"):
        engine.step()
    with pytest.raises(UsageError, match="pass 1 to 8"):
        engine.logits(list(range(9)))
    with pytest.raises(UsageError, match="max_sequences"):
        ToyEngine(n_batch=4, max_sequences=5)


def served(engine: ToyEngine, seq: int, prompt: list[int], n: int, budget: int = 4) -> tuple[Reuse, list[int]]:
    """One request as `serve` runs it: admit, advance until n tokens, finish."""
    reuse = engine.admit(seq, prompt, Sampling())
    out: list[int] = []
    while len(out) < n:
        out += [token for s, token in engine.advance(budget).items() if s == seq]
    engine.finish(seq)
    return reuse, out


def cold_tokens(prompt: list[int], n: int) -> list[int]:
    engine = ToyEngine(n_batch=4, first_chunk=1)
    return [engine.start(0, prompt, Sampling())] + [engine.step()[0] for _ in range(n - 1)]


def test_served_prompts_reuse_the_longest_prefix_a_slot_holds_and_give_the_cold_tokens() -> None:
    engine = ToyEngine(n_batch=4, first_chunk=1)
    system = [3, 1, 4, 1, 5, 9, 2, 6]
    first, second = [*system, 5, 3], [*system, 8, 9, 7]
    assert served(engine, 1, first, 3) == (Reuse(0, ""), cold_tokens(first, 3))
    assert engine.pick_slot([0, 1], second) == 1  # the slot holding the system prompt
    assert served(engine, 1, second, 3) == (Reuse(len(system), "slot"), cold_tokens(second, 3))
    engine.calls.clear()
    # the same prompt again: all but its last token, whose logits give the first token
    assert served(engine, 1, second, 3) == (Reuse(len(second) - 1, "slot"), cold_tokens(second, 3))
    assert engine.calls[0] == (len(second) - 1, 1)
    # a cold start() ignores what the slot held, and after it the slot holds nothing to reuse
    assert engine.start(1, second, Sampling()) == cold_tokens(second, 1)[0]
    engine.finish(1)
    assert served(engine, 1, second, 1)[0] == Reuse(0, "")


def test_a_repurposed_slot_lends_its_prefix_to_the_store_and_gets_a_better_one_back() -> None:
    engine = ToyEngine(n_batch=16, max_sequences=1, n_ctx=128, prefix_cache=1)
    one, two = list(range(1, 41)), [7] * 40  # two system prompts, one slot
    assert served(engine, 0, [*one, 1], 2)[0] == Reuse(0, "")
    assert served(engine, 0, [*two, 2], 2)[0] == Reuse(0, "")  # `one` moved to the store
    reuse, tokens = served(engine, 0, [*one, 3], 2)
    assert reuse == Reuse(len(one), "store") and tokens == cold_tokens([*one, 3], 2)
    assert engine.prefix_entries == 1  # `two` took its place (capacity 1)
    assert served(engine, 0, [*two, 4], 2)[0] == Reuse(len(two), "store")


def test_a_long_prompt_is_prefilled_in_chunks_between_the_decode_steps_of_running_sequences() -> None:
    engine = ToyEngine(n_batch=8)
    engine.admit(0, [1, 2], Sampling())
    assert list(engine.advance(4)) == [0]
    long_prompt = list(range(1, 21))
    engine.admit(1, long_prompt, Sampling())
    produced = [sorted(engine.advance(4)) for _ in range(5)]
    assert produced == [[0], [0], [0], [0], [0, 1]]  # sequence 0 advanced at every step of the 5 chunks
    assert engine.calls[1:] == [(2, 1), (0, 4), (3, 1), (4, 4), (4, 1), (8, 4), (5, 1), (12, 4), (6, 1), (16, 4)]
    assert engine.step()[1] == cold_tokens(long_prompt, 2)[1]


def test_side_files_give_eos_bos_and_the_chat_template(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7], "bos_token_id": 1}))
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 2}))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "eos_token": "<|end|>",
                "add_bos_token": True,
                "chat_template": [{"name": "default", "template": "{{ messages }}"}],
                "added_tokens_decoder": {
                    "9": {"content": "<|end|>", "special": True},
                    "10": {"content": "plain", "special": False},
                },
            }
        )
    )
    files = HFFiles(tmp_path)
    assert files.eos_ids == {2, 7, 9} and files.bos_id == 1 and files.add_bos
    assert files.special_tokens == {9: "<|end|>"} and files.chat_template == "{{ messages }}"
    (tmp_path / "chat_template.jinja").write_text("{{ jinja }}")
    assert HFFiles(tmp_path).chat_template == "{{ jinja }}"
    assert HFFiles(tmp_path / "missing").eos_ids == frozenset()


def test_token_bytes_for_byte_level_and_sentencepiece_vocabularies(tmp_path: Path) -> None:
    byte_level = {
        "model": {"type": "BPE", "vocab": {"Ġcaf": 0, "Ã©": 1, "æĹ": 2, "¥": 3}},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": [{"id": 4, "content": "<|im_end|>", "special": True}],
    }
    path = tmp_path / "bl.json"
    path.write_text(json.dumps(byte_level))
    table = token_bytes_table(path, 5)
    assert table[0] + table[1] == " café".encode() and table[2] + table[3] == "日".encode()
    assert table[2] == b"\xe6\x97" and table[4] == b""  # half a character; special tokens render empty
    spm = {
        "model": {"type": "BPE", "vocab": {"▁the": 0, "<0xE2>": 1, "<0x98>": 2, "<0x83>": 3}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace"}, {"type": "ByteFallback"}]},
    }
    path = tmp_path / "spm.json"
    path.write_text(json.dumps(spm))
    table = token_bytes_table(path, 4)
    assert table[0] == b" the" and b"".join(table[1:]) == "☃".encode()


def test_engine_settings_are_optional_runtime_config_keys() -> None:
    base = {"artifact": "openvino-INT8", "n_threads": 2, "n_threads_batch": 2}
    assert "num_streams" not in render_runtime_toml(base)  # unset: the runtime's own default
    text = render_runtime_toml({**base, "num_streams": 1, "inference_precision": "f32", "execution_mode": "parallel"})
    assert 'inference_precision = "f32"' in text and "num_streams = 1" in text
    with pytest.raises(ValueError):
        RuntimeConfig(**base, scheduling_core_type="BIG_CORES")
    with pytest.raises(ValueError):
        RuntimeConfig(**base, kv_cache_precision="i4")
    with pytest.raises(ValueError):
        RuntimeConfig(**base, dynamic_quantization_group_size=-1)


def test_openvino_and_onnxruntime_properties_from_the_config() -> None:
    import onnxruntime as ort

    from edgekit.backends.onnxruntime.engine import session_options
    from edgekit.backends.openvino.engine import compile_properties

    assert compile_properties(3) == {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": 3}
    props = compile_properties(2, num_streams=1, cpu_pinning=False, scheduling_core_type="PCORE_ONLY",
                               inference_precision="f32", kv_cache_precision="f16",
                               dynamic_quantization_group_size=0)  # fmt: skip
    assert props["NUM_STREAMS"] == 1 and props["ENABLE_CPU_PINNING"] is False
    assert props["SCHEDULING_CORE_TYPE"] == "PCORE_ONLY" and props["INFERENCE_PRECISION_HINT"] == "f32"
    assert props["KV_CACHE_PRECISION"] == "f16" and props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == 0
    options = session_options(2, inter_op_threads=2, execution_mode="parallel", memory_arena=False)
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 2)
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL and not options.enable_cpu_mem_arena


class ToyBatchEngine(StepwiseEngine):
    """A batched toy: the KV state is the tokens themselves, (rows, 1, cells, 1); the next token is
    (sum of the visible real tokens + the position) mod VOCAB, so wrong padding, masks or positions show."""

    backend = "toy-batch"
    batched = True
    prefix_reuse = True

    def __init__(self, max_sequences: int = 4, n_ctx: int = 128, n_batch: int = 4, prefix_cache: int = 0) -> None:
        self.n_vocab = VOCAB
        self._init_sequences(max_sequences, n_ctx, n_batch, prefix_cache)
        self.rows_per_call: list[int] = []

    def _new_slot(self) -> dict[str, np.ndarray]:
        return {"kv": np.zeros((1, 1, 0, 1))}

    def _reset(self, slot: dict[str, np.ndarray]) -> None:
        slot["kv"] = np.zeros((1, 1, 0, 1))

    def _snapshot(self, slot: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"kv": slot["kv"].copy()}

    def _restore(self, slot: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> None:
        slot["kv"] = state["kv"].copy()

    def _truncate(self, slot: dict[str, np.ndarray], n: int) -> None:
        assert slot["kv"].shape[:2] == (1, 1) and slot["kv"].shape[2] >= n, "a served slot holds one unpadded row"
        slot["kv"] = slot["kv"][:, :, :n].copy()

    def _infer(
        self, slot: dict[str, np.ndarray], ids: np.ndarray, positions: np.ndarray, mask: np.ndarray
    ) -> np.ndarray:
        rows, n = ids.shape
        assert slot["kv"].shape[0] == rows and mask.shape == (rows, slot["kv"].shape[2] + n)
        kv = np.concatenate([slot["kv"], ids[:, None, :, None].astype(float)], axis=2)
        self.rows_per_call.append(rows)
        out = np.zeros((rows, n, VOCAB), dtype=np.float32)
        for r in range(rows):
            for i in range(n):
                visible = kv.shape[2] - n + i + 1
                assert positions[r, i] == mask[r, : visible - 1].sum(), "position is not the count of real cells"
                total = (kv[r, 0, :visible, 0] * mask[r, :visible]).sum()
                out[r, i, int(total + positions[r, i]) % VOCAB] = 1.0
        slot["kv"] = kv
        return out


def test_batched_decode_gives_each_sequence_what_it_gets_alone() -> None:
    prompts = {0: [3, 1, 4], 1: [1, 5, 9, 2, 6, 5, 3], 2: [5], 3: [8, 9, 7, 9]}

    def alone(prompt: list[int], n: int) -> list[int]:
        engine = ToyBatchEngine()
        return [engine.start(0, prompt, Sampling())] + [engine.step()[0] for _ in range(n - 1)]

    expected = {seq: alone(p, 9) for seq, p in prompts.items()}
    engine = ToyBatchEngine()
    got = {seq: [engine.start(seq, prompts[seq], Sampling())] for seq in (0, 1)}
    for _ in range(2):  # two sequences of different lengths: one call of two rows per step
        for seq, token in engine.step().items():
            got[seq].append(token)
    got.update({seq: [engine.start(seq, prompts[seq], Sampling())] for seq in (2, 3)})  # join a running batch
    while any(len(tokens) < 9 for tokens in got.values()):
        for seq, token in engine.step().items():
            got[seq].append(token)
            if len(got[seq]) == 9:
                engine.finish(seq)  # leaves the batch; the others continue in a repacked one
    assert got == expected
    assert max(engine.rows_per_call) == 4 and engine.rows_per_call[-1] == 2  # 2 and 3 end together
    assert engine.active == [] and engine._batch is None  # the batch slot is free again
    assert engine.start(0, prompts[1], Sampling()) == expected[1][0]


def test_a_step_of_four_sequences_is_one_inference_call() -> None:
    engine = ToyBatchEngine()
    for seq in range(4):
        engine.start(seq, [seq + 1] * (seq + 2), Sampling())
    engine.rows_per_call.clear()
    engine.step()
    engine.step()
    assert engine.rows_per_call == [4, 4]


def serve_together(
    engine: ToyBatchEngine, prompts: dict[int, list[int]], n: int
) -> tuple[dict[int, Reuse], dict[int, list[int]]]:
    """Requests as `serve` runs them side by side: admit all, advance until each has n tokens, finish each."""
    reuse = {seq: engine.admit(seq, prompt, Sampling()) for seq, prompt in prompts.items()}
    out: dict[int, list[int]] = {seq: [] for seq in prompts}
    while any(len(tokens) < n for tokens in out.values()):
        for seq, token in engine.advance(engine.n_batch).items():
            out[seq].append(token)
            if len(out[seq]) == n:
                engine.finish(seq)
    return reuse, out


def test_served_sequences_restored_from_a_prefix_decode_as_rows_of_one_call_and_get_what_they_get_alone() -> None:
    def alone(prompts: dict[int, list[int]]) -> dict[int, list[int]]:
        out = {}
        for seq, prompt in prompts.items():
            engine = ToyBatchEngine()
            out[seq] = [engine.start(0, prompt, Sampling())] + [engine.step()[0] for _ in range(11)]
        return out

    system, other = [3, 1, 4, 1, 5, 9, 2, 6] * 5, [7, 2] * 20  # 40 tokens each: worth a store entry
    engine = ToyBatchEngine(n_batch=48, prefix_cache=2)
    first = {seq: [*system, seq + 1] * (1 + seq % 2) for seq in range(4)}  # rows of different lengths
    reuse, got = serve_together(engine, first, 12)
    assert got == alone(first) and max(engine.rows_per_call) == 4
    # each slot got its row back when its sequence finished: the next prompts reuse what the slots hold
    second = {seq: [*first[seq], *got[seq][:2], 5] for seq in range(4)}
    engine.rows_per_call.clear()
    reuse, got = serve_together(engine, second, 12)
    assert reuse == {seq: Reuse(len(first[seq]) + 2, "slot") for seq in range(4)}  # prompt and 2 generated tokens
    assert got == alone(second) and max(engine.rows_per_call) == 4
    # slot 0 is repurposed (its prefix goes to the store), then slot 1 takes that prefix back from the store
    assert serve_together(engine, {0: [*other, 1]}, 12)[0] == {0: Reuse(0, "")}
    third = {1: [*second[0], got[0][0], 4], 2: [*other, 2], 3: [*second[3], got[3][0], 9]}
    reuse, got = serve_together(engine, third, 12)
    assert reuse == {1: Reuse(len(second[0]) + 1, "store"), 2: Reuse(0, ""), 3: Reuse(len(second[3]) + 1, "slot")}
    assert got == alone(third) and engine._batch is None


def test_pack_left_pads_rows_and_drops_padding_no_row_needs() -> None:
    from edgekit.runtime.engines.batching import attention_mask, pack

    a = np.arange(1, 4, dtype=np.float32).reshape(1, 1, 3, 1)  # 3 real cells
    b = np.array([0, 0, 0, 7, 8], dtype=np.float32).reshape(1, 1, 5, 1)  # 2 real cells after 3 of padding
    packed, cells = pack([({"k": a}, 3), ({"k": b}, 2)])
    assert cells == 3 and packed["k"][:, 0, :, 0].tolist() == [[1, 2, 3], [0, 7, 8]]
    assert attention_mask([3, 2], 3, 1).tolist() == [[1, 1, 1, 1], [0, 1, 1, 1]]
