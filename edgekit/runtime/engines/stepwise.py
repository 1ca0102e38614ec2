"""Bookkeeping shared by the engines whose sequences each own a KV state (OpenVINO, ONNX Runtime).

Each active sequence holds one *slot* — an OpenVINO infer request with its model state, or the
past key/value arrays of an ONNX session — and `step()` advances the sequences one after another.
Prompts are prefilled in chunks of `n_batch` tokens, for `start()` and `logits()` alike, so the
logits validation measures come from the same code path that serves requests on the box.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import EngineError, UsageError
from edgekit.runtime.engines.base import Sampling, VocabularyMixin, checked_prompt
from edgekit.runtime.engines.hf_files import HFFiles
from edgekit.runtime.engines.sampling import new_rng, sample
from edgekit.runtime.engines.stepwise_serving import StepwiseServing

MAX_SEQUENCES = 4
PREFIX_CACHE = 8  # prefixes kept in host memory beyond the slots (runtime.toml `prefix_cache`)


@dataclass
class _Sequence:
    slot: Any
    pos: int  # tokens in the KV state: the next token goes to this position
    last: int  # the token to feed at the next step
    sampling: Sampling
    rng: np.random.Generator


class StepwiseEngine(StepwiseServing, VocabularyMixin):
    """Subclasses set the sizes below and implement `_new_slot`, `_reset` and `_run`, and `detokenize`."""

    backend: str
    max_sequences: int
    n_ctx: int
    n_batch: int
    n_vocab: int
    # Prefill this many leading tokens on their own before the n_batch chunks (0: no split).
    first_chunk: int = 0

    def _open_folder(self, folder: Path, files: tuple[str, ...], kind: str) -> None:
        """The artifact folder, with the files this engine reads (else: not an artifact this backend built)."""
        self.path = Path(folder)
        for name in files:
            if not (self.path / name).is_file():
                raise EngineError(
                    f"{self.path} has no {name}: not an {kind} artifact folder built by edgekit",
                    "rebuild the bundle, or run `edgekit verify` on it",
                )

    def _init_sequences(self, max_sequences: int, n_ctx: int, n_batch: int, prefix_cache: int = PREFIX_CACHE) -> None:
        if not 1 <= max_sequences <= MAX_SEQUENCES:
            raise UsageError(f"max_sequences is {max_sequences}", f"use 1 to {MAX_SEQUENCES}")
        self.max_sequences, self.n_ctx, self.n_batch = max_sequences, n_ctx, max(1, n_batch)
        self._seqs: dict[int, _Sequence] = {}
        self._free: list[Any] = []
        self._scratch: Any = None
        self._init_serving(prefix_cache)

    def _read_vocabulary(
        self,
        files: HFFiles,
        fallback_eos: Callable[[], frozenset[int]] = frozenset,
        fallback_template: Callable[[], str | None] = lambda: None,
    ) -> None:
        """Special tokens, end-of-generation ids, BOS and the chat template from the artifact's side files
        (the fallbacks are asked only for what the side files lack)."""
        self._special = files.special_tokens
        self._eos = files.eos_ids or fallback_eos()
        self._template = files.chat_template or fallback_template()
        self.bos_id = files.bos_id
        self.add_bos = files.add_bos
        self.eos_id = min(self._eos) if self._eos else None

    def token_text(self, token: int) -> str:
        """The text of a token, special tokens included (e.g. '<|im_end|>')."""
        if int(token) in self._special:
            return self._special[int(token)]
        return self.detokenize([int(token)]).decode("utf-8", errors="replace")

    def detokenize(self, ids: Sequence[int]) -> bytes:
        raise NotImplementedError

    # --- what a subclass provides ---------------------------------------------------------------

    def _new_slot(self) -> Any:
        raise NotImplementedError

    def _reset(self, slot: Any) -> None:
        raise NotImplementedError

    def _run(self, slot: Any, ids: Sequence[int], pos: int) -> np.ndarray:
        """Feed `ids` at positions pos… into `slot`'s KV state; return their logits, (len(ids), vocab)."""
        raise NotImplementedError

    def _drop_slots(self) -> None:
        """Forget every slot (after the model was recompiled); active sequences must be finished first."""
        self._free.clear()
        self._scratch = None
        self._init_serving(self._prefix.capacity)

    # --- the Engine protocol ----------------------------------------------------------------------

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        ids = [int(i) for i in ids]
        if not 0 < len(ids) <= self.n_ctx:
            raise UsageError(f"logits() of {len(ids)} tokens", f"pass 1 to {self.n_ctx} tokens (n_ctx)")
        if self._scratch is None:
            self._scratch = self._new_slot()
        out = np.empty((len(ids), self.n_vocab), dtype=np.float32)
        try:
            for begin, end in self._chunks(len(ids)):
                out[begin:end] = self._run(self._scratch, ids[begin:end], begin)
        finally:
            self._reset(self._scratch)
        return out

    def start(self, seq: int, prompt_ids: Sequence[int], sampling: Sampling) -> int:
        ids = checked_prompt(seq, prompt_ids, self.max_sequences, self._seqs, self.n_ctx)
        slot = self._unbind(seq)  # a cold start: whatever the slot held for reuse is dropped
        if slot is None:
            slot = self._free.pop() if self._free else self._new_slot()
        try:
            last = None
            for begin, end in self._chunks(len(ids)):
                last = self._run(slot, ids[begin:end], begin)[-1]
            assert last is not None
            state = _Sequence(slot=slot, pos=len(ids), last=-1, sampling=sampling, rng=new_rng(sampling))
            state.last = sample(last, sampling, state.rng)
        except BaseException:
            self._reset(slot)
            self._free.append(slot)
            raise
        self._seqs[seq] = state
        return state.last

    def step(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for seq in sorted(self._seqs):
            state = self._seqs[seq]
            if state.pos >= self.n_ctx:
                raise UsageError(
                    f"sequence {seq} filled its context of {self.n_ctx} tokens",
                    "finish it; callers must stop at n_ctx (prompt + generated tokens)",
                )
            row = self._run(state.slot, [state.last], state.pos)[-1]
            state.pos += 1
            state.last = sample(row, state.sampling, state.rng)
            out[seq] = state.last
        return out

    def finish(self, seq: int) -> None:
        state = self._seqs.pop(seq, None)
        if self._keeps(seq):  # a served sequence: its state stays for prefix reuse
            return
        slot = self._unbind(seq)
        if slot is None and state is not None:
            self._reset(state.slot)
            slot = state.slot
        if slot is not None:
            self._free.append(slot)

    def _begin_sequence(self, seq: int, slot: Any, pos: int, last: int, sampling: Sampling, rng: Any) -> None:
        self._seqs[seq] = _Sequence(slot=slot, pos=pos, last=last, sampling=sampling, rng=rng)

    @property
    def active(self) -> list[int]:
        return sorted(self._seqs)

    # --- internals ----------------------------------------------------------------------------

    def _chunks(self, n: int) -> Iterator[tuple[int, int]]:
        begin = 0
        if self.first_chunk and n > self.first_chunk:
            yield 0, self.first_chunk
            begin = self.first_chunk
        while begin < n:
            end = min(n, begin + self.n_batch)
            yield begin, end
            begin = end
