"""How `serve` drives the OpenVINO and ONNX Runtime engines: prefix reuse per slot, and chunked prefill.

A served sequence keeps its slot — the OpenVINO infer request whose model state is its KV cache, or
its ONNX Runtime past key/value arrays — after `finish()`, bound to its sequence id with the token ids
it holds (`PrefixCache`). `admit()` keeps the longest common prefix with the new prompt: the backend
cuts its state along the time axis (`_truncate`), copies it (`_snapshot`) into the store of prefixes
kept in host memory, and puts a stored copy back (`_restore`). ONNX Runtime's past arrays are plain
numpy, so a cut is a view and exact. OpenVINO's state is read and written through `query_state()`:
with the CPU plugin's default u8 KV cache and bf16 inference, reading dequantizes and writing quantizes
again, so logits after a hit differ from a cold prefill's by about as much as two cold prefills chunked
differently do (both measured in tests/e2e/test_all_backends.py); a cut costs about 1% of prefilling
the prefix again.

`advance()` steps the generating sequences (the engine's own `step()`), then feeds up to `prompt_budget`
prompt tokens of the admitted ones, oldest first. `start()`, `logits()` and the bench stay cold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edgekit.runtime.engines.base import Sampling, checked_prompt
from edgekit.runtime.engines.prefix import PrefixCache, PrefixSlots, Reuse
from edgekit.runtime.engines.sampling import SampledLogprobs, new_rng


@dataclass
class _Prefill:
    slot: Any
    todo: list[int]
    pos: int
    sampling: Sampling


class _SlotOps:
    """`KVOps` over the slots bound to sequence ids, through the backend's `_truncate/_snapshot/_restore`."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def truncate(self, seq: int, n: int) -> None:
        self._engine._truncate(self._engine._bound[seq], n)

    def snapshot(self, seq: int) -> Any:
        return self._engine._snapshot(self._engine._bound[seq])

    def restore(self, seq: int, state: Any) -> None:
        self._engine._restore(self._engine._bound[seq], state)


class StepwiseServing(PrefixSlots, SampledLogprobs):
    """`pick_slot`, `admit` and `advance` (the ServingEngine protocol) for `StepwiseEngine`."""

    _seqs: dict[int, Any]
    _free: list[Any]
    prefix_reuse = False  # a backend that implements _truncate, _snapshot and _restore sets it
    max_sequences: int
    n_ctx: int
    n_batch: int
    first_chunk: int

    def _init_serving(self, prefix_cache: int) -> None:
        self._prefix = PrefixCache(self.max_sequences, prefix_cache if self.prefix_reuse else 0, _SlotOps(self))
        self._prefills: dict[int, _Prefill] = {}
        self._bound: dict[int, Any] = {}  # sequence id -> the slot that holds its tokens
        self.last_prompt_tokens = 0
        self._init_logprobs()

    def admit(self, seq: int, prompt_ids: Sequence[int], sampling: Sampling) -> Reuse:
        ids = checked_prompt(seq, prompt_ids, self.max_sequences, self._seqs.keys() | self._prefills.keys(), self.n_ctx)
        if seq not in self._bound:
            self._bound[seq] = self._free.pop() if self._free else self._new_slot()
            self._prefix.forget(seq)
        if not self.prefix_reuse:
            self._prefix.forget(seq)  # nothing kept: prepare() cuts the slot to 0 tokens, a reset
        reuse = self._prefix.prepare(seq, ids)
        self._prefills[seq] = _Prefill(self._bound[seq], ids[reuse.tokens :], reuse.tokens, sampling)
        return reuse

    def advance(self, prompt_budget: int) -> dict[int, int]:
        fed = [(seq, state.last) for seq, state in self._seqs.items()]
        out = self.step() if self._seqs else {}
        for seq, token in fed:
            if seq in self._bound:
                self._prefix.fed(seq, (token,))
        budget = max(1, min(prompt_budget, self.n_batch))
        self.last_prompt_tokens = 0
        for seq, prefill in list(self._prefills.items()):
            if budget <= 0:
                break
            take = budget
            if self.first_chunk and prefill.pos == 0:
                take = min(take, self.first_chunk)  # the backend's own first chunk (see its engine)
            chunk = prefill.todo[:take]
            try:
                logits = self._run(prefill.slot, chunk, prefill.pos)
            except BaseException:
                self._prefix.forget(seq)
                raise
            self._prefix.fed(seq, chunk)
            prefill.pos += len(chunk)
            del prefill.todo[: len(chunk)]
            budget -= len(chunk)
            self.last_prompt_tokens += len(chunk)
            if not prefill.todo:
                out[seq] = self._first_token(seq, logits[-1])
        return out

    def _first_token(self, seq: int, logits: Any) -> int:
        prefill = self._prefills.pop(seq)
        rng = new_rng(prefill.sampling)
        token = self._pick(seq, logits, prefill.sampling, rng)
        self._begin_sequence(seq, prefill.slot, prefill.pos, token, prefill.sampling, rng)
        return token

    def _unbind(self, seq: int) -> Any | None:
        """`seq` leaves serving (a cold `start`, or its state is no longer trusted): its slot, reset, or None."""
        self._prefills.pop(seq, None)
        self._prefix.forget(seq)
        slot = self._bound.pop(seq, None)
        if slot is not None:
            self._reset(slot)
        return slot

    def _keeps(self, seq: int) -> bool:
        """Whether a finished `seq` keeps its slot for prefix reuse (a served sequence holding tokens)."""
        self._prefills.pop(seq, None)
        return seq in self._bound and bool(self._prefix.held(seq))

    # --- what the engine provides -------------------------------------------------------------

    def step(self) -> dict[int, int]:
        raise NotImplementedError

    def _new_slot(self) -> Any:
        raise NotImplementedError

    def _reset(self, slot: Any) -> None:
        raise NotImplementedError

    def _run(self, slot: Any, ids: Sequence[int], pos: int) -> Any:
        raise NotImplementedError

    def _begin_sequence(self, seq: int, slot: Any, pos: int, last: int, sampling: Sampling, rng: Any) -> None:
        raise NotImplementedError

    def _truncate(self, slot: Any, n: int) -> None:
        if n:
            raise NotImplementedError
        self._reset(slot)

    def _snapshot(self, slot: Any) -> Any:
        raise NotImplementedError

    def _restore(self, slot: Any, state: Any) -> None:
        raise NotImplementedError
