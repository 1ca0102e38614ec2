"""How `serve` drives the llama.cpp engine: prompt-prefix reuse per KV slot, and chunked prefill.

Each sequence id is one KV stream of the context (`kv_unified = false`), and it is also the slot that
prefix reuse works on: its cells stay after `finish()` (with the token ids they came from, in a
`PrefixCache`), and `admit()` keeps the longest common prefix with the new prompt (`llama_memory_seq_rm`
drops the rest). Prefixes beyond the slots are kept in host memory, copied out of and back into a stream
with `llama_state_seq_get_data` / `llama_state_seq_set_data` (what llama-server's `--cache-ram` does).

`advance()` builds one `llama_batch` of the decode token of every generating sequence plus up to
`prompt_budget` prompt tokens of the admitted ones (oldest first), and runs it in one `llama_decode`: the
weights are read once for both, and a long prompt is spread over several steps instead of stopping the
running streams for its whole prefill. With no prompt to prefill it is the engine's own `step()`.

`start()`, `logits()` and the bench stay cold: they clear the slot, so their timings never include reuse.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.errors import EngineError
from edgekit.runtime.engines.base import Sampling, checked_prompt
from edgekit.runtime.engines.prefix import PrefixCache, PrefixSlots, Reuse
from edgekit.runtime.engines.sampling import SampledLogprobs, new_rng

PREFIX_CACHE = 8  # prefixes kept in host memory beyond the slots (runtime.toml `prefix_cache`)


@dataclass
class _Prefill:
    todo: list[int]  # prompt tokens still to compute
    pos: int  # where the next one goes
    sampling: Sampling


class _KVCells:
    """The `KVOps` of a llama.cpp context: remove cells, copy a sequence's state to and from host memory."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def truncate(self, seq: int, n: int) -> None:
        engine = self._engine
        engine._llama.llama_memory_seq_rm(engine._memory, seq, n, -1)

    def snapshot(self, seq: int) -> Any:
        llama_cpp, ctx = self._engine._llama, self._engine._ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, seq)
        data = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(ctx, data, size, seq) != size:
            raise EngineError(f"llama.cpp could not copy the KV state of sequence {seq}", "this is a bug in edgekit")
        return data

    def restore(self, seq: int, state: Any) -> None:
        engine = self._engine
        engine._llama.llama_memory_seq_rm(engine._memory, seq, -1, -1)
        if engine._llama.llama_state_seq_set_data(engine._ctx, state, len(state), seq) != len(state):
            engine._llama.llama_memory_seq_rm(engine._memory, seq, -1, -1)
            raise EngineError(f"llama.cpp could not restore a KV state into sequence {seq}", "lower prefix_cache")


class ServingMixin(PrefixSlots, SampledLogprobs):
    """`pick_slot`, `admit` and `advance` (the ServingEngine protocol) for `GGUFEngine`."""

    _llama: Any
    _memory: Any
    _seqs: dict[int, Any]
    max_sequences: int
    n_ctx: int
    n_batch: int
    n_threads: int
    n_threads_batch: int

    if TYPE_CHECKING:  # what GGUFEngine provides

        def step(self) -> dict[int, int]: ...
        def _set_threads(self, n_threads: int, n_threads_batch: int) -> None: ...
        def _fill(self, items: list[tuple[int, int, int, bool]]) -> None: ...
        def _decode(self) -> None: ...
        def _drop_grammar(self, seq: int) -> None: ...
        def _logits_row(self, i: int) -> np.ndarray: ...
        def _begin_sequence(
            self, seq: int, pos: int, last: int, sampling: Sampling, rng: np.random.Generator
        ) -> None: ...

    def _init_serving(self, prefix_cache: int) -> None:
        self._prefix = PrefixCache(self.max_sequences, prefix_cache, _KVCells(self))
        self._prefills: dict[int, _Prefill] = {}
        self.last_prompt_tokens = 0
        self._init_logprobs()

    def admit(self, seq: int, prompt_ids: Sequence[int], sampling: Sampling) -> Reuse:
        busy = self._seqs.keys() | self._prefills.keys()
        ids = checked_prompt(seq, prompt_ids, self.max_sequences, busy, self.n_ctx)
        reuse = self._prefix.prepare(seq, ids)
        self._drop_grammar(seq)  # a new sequence starts its grammar (if it has one) from the start
        self._prefills[seq] = _Prefill(todo=ids[reuse.tokens :], pos=reuse.tokens, sampling=sampling)
        return reuse

    def advance(self, prompt_budget: int) -> dict[int, int]:
        self.last_prompt_tokens = 0
        if not self._prefills:
            fed = [(seq, state.last) for seq, state in self._seqs.items()]
            stepped = self.step()
            for seq, token in fed:
                self._prefix.fed(seq, (token,))
            return stepped
        decoding = sorted(self._seqs)
        plan = self._prompt_chunks(max(1, min(prompt_budget, self.n_batch - len(decoding))))
        items = [(self._seqs[s].last, self._seqs[s].pos, s, True) for s in decoding]
        for seq, chunk, done in plan:
            pos = self._prefills[seq].pos
            items += [(t, pos + i, seq, done and i == len(chunk) - 1) for i, t in enumerate(chunk)]
        self._set_threads(self.n_threads, self.n_threads_batch)
        try:
            self._fill(items)
            self._decode()
        except BaseException:
            for seq in {*decoding, *(p[0] for p in plan)}:
                self._prefix.forget(seq)  # what the failed batch left in the cells is unknown
            raise
        self.last_prompt_tokens = sum(len(chunk) for _, chunk, _ in plan)
        out: dict[int, int] = {}
        for row, seq in enumerate(decoding):
            state = self._seqs[seq]
            self._prefix.fed(seq, (state.last,))
            state.pos += 1
            state.last = out[seq] = self._pick(seq, self._logits_row(row), state.sampling, state.rng)
        row = len(decoding)
        for seq, chunk, done in plan:
            row += len(chunk)
            if self._chunk_done(seq, chunk, done):
                out[seq] = self._first_token(seq, self._logits_row(row - 1))
        return out

    def _prompt_chunks(self, budget: int) -> list[tuple[int, list[int], bool]]:
        """(seq, tokens, last chunk?) for this batch: the admitted prompts in order, within the budget."""
        plan = []
        for seq, prefill in self._prefills.items():
            if budget <= 0:
                break
            chunk = prefill.todo[:budget]
            plan.append((seq, chunk, len(chunk) == len(prefill.todo)))
            budget -= len(chunk)
        return plan

    def _chunk_done(self, seq: int, chunk: list[int], last: bool) -> bool:
        prefill = self._prefills[seq]
        self._prefix.fed(seq, chunk)
        prefill.pos += len(chunk)
        del prefill.todo[: len(chunk)]
        return last

    def _first_token(self, seq: int, logits: np.ndarray) -> int:
        prefill = self._prefills.pop(seq)
        rng = new_rng(prefill.sampling)
        token = self._pick(seq, logits, prefill.sampling, rng)
        self._begin_sequence(seq, prefill.pos, token, prefill.sampling, rng)
        return token

    def _end_serving(self, seq: int) -> bool:
        """Drop `seq`'s prefill; True when its cells are kept for reuse (the slot remembers their tokens)."""
        self._prefills.pop(seq, None)
        return bool(self._prefix.held(seq))
