"""Bookkeeping shared by the engines whose sequences each own a KV state (OpenVINO, ONNX Runtime).

A *slot* holds KV state — an OpenVINO infer request with its model state, or the past key/value
arrays of an ONNX session. Prompts are prefilled in a slot of their own, in chunks of `n_batch`
tokens, for `start()` and `logits()` alike, so the logits validation measures come from the same
code path that serves requests on the box.

Decode is batched: with several sequences active, `step()` runs them as the rows of one inference
call, so the weights are read once per step for all of them (decode on a CPU is bound by reading
weights). The rows' KV states live in one *batch slot*, each row left-padded to the longest with an
attention mask of 0 over its padding, and each row at its own positions. The batch is repacked
(`edgekit.runtime.engines.batching.pack`) only when its membership changes: a sequence that starts
is merged in at the next step, one that finishes is dropped at the next step, and the padding no
remaining row needs is trimmed then.

Serving (`StepwiseServing`) binds a slot to each sequence id and keeps it after `finish()` for prefix
reuse: a prompt is prefilled in its bound slot after the prefix it already holds (or one restored
from a snapshot), then joins the batch like any other. A served sequence's bound slot is emptied
while its row is in the batch, and gets the row back (its real cells, no padding) when it finishes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import EngineError, UsageError
from edgekit.runtime.engines.base import Sampling, VocabularyMixin, checked_prompt
from edgekit.runtime.engines.batching import Batch, attention_mask, pack
from edgekit.runtime.engines.hf_files import HFFiles
from edgekit.runtime.engines.sampling import new_rng
from edgekit.runtime.engines.stepwise_serving import StepwiseServing

MAX_SEQUENCES = 4
PREFIX_CACHE = 8  # prefixes kept in host memory beyond the slots (runtime.toml `prefix_cache`)


@dataclass
class _Sequence:
    slot: Any  # its own KV state after the prompt; None once merged into the batch slot
    pos: int  # tokens in the KV state: the next token goes to this position
    last: int  # the token to feed at the next step
    sampling: Sampling
    rng: np.random.Generator


class StepwiseEngine(StepwiseServing, VocabularyMixin):
    """Subclasses set the sizes below and implement `_new_slot`, `_reset`, `_infer` (or only `_run`) and
    `detokenize`; with `_snapshot` and `_restore` too, they set `batched` and decode sequences as rows of one
    call; with `_truncate` as well, `prefix_reuse` (serving keeps prompt prefixes, `StepwiseServing`)."""

    backend: str
    max_sequences: int
    n_ctx: int
    n_batch: int
    n_vocab: int
    # Prefill this many leading tokens on their own before the n_batch chunks (0: no split).
    first_chunk: int = 0
    batched: bool = False

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
        self._batch: Batch | None = None
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

    def _infer(self, slot: Any, ids: np.ndarray, positions: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """One inference call: `ids` and `positions` (rows, n) appended to `slot`'s KV state of mask.shape[1] - n
        cells a row, `mask` (rows, cells + n) 0 over padding; the logits, (rows, n, vocab)."""
        raise NotImplementedError

    def _snapshot(self, slot: Any) -> dict[str, np.ndarray]:
        """`slot`'s KV state: name → (rows, kv_heads, cells, head_dim) arrays, never written by the slot again."""
        raise NotImplementedError

    def _restore(self, slot: Any, state: dict[str, np.ndarray]) -> None:
        """Replace `slot`'s KV state (what `_snapshot` returns, any number of rows and cells)."""
        raise NotImplementedError

    def _run(self, slot: Any, ids: Sequence[int], pos: int) -> np.ndarray:
        """Feed `ids` at positions pos… into a one-row `slot`; return their logits, (len(ids), vocab)."""
        n = len(ids)
        positions = np.arange(pos, pos + n, dtype=np.int64)[None]
        return self._infer(slot, np.asarray(ids, dtype=np.int64)[None], positions, np.ones((1, pos + n), np.int64))[0]

    def _drop_slots(self) -> None:
        """Forget every slot (after the model was recompiled); active sequences must be finished first."""
        self._free.clear()
        self._scratch = None
        self._batch = None
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
            state.last = self._pick(seq, last, sampling, state.rng)
        except BaseException:
            self._reset(slot)
            self._free.append(slot)
            raise
        self._seqs[seq] = state
        return state.last

    def step(self) -> dict[int, int]:
        order = sorted(self._seqs)
        for seq in order:
            if self._seqs[seq].pos >= self.n_ctx:
                raise UsageError(
                    f"sequence {seq} filled its context of {self.n_ctx} tokens",
                    "finish it; callers must stop at n_ctx (prompt + generated tokens)",
                )
        if not order:
            return {}
        batch = self.batched and (len(order) > 1 or self._batch is not None)
        rows = self._step_rows(order) if batch else {}  # else one after another, each in its own slot
        out: dict[int, int] = {}
        for seq in order:
            state = self._seqs[seq]
            if seq not in rows:
                rows[seq] = self._run(state.slot, [state.last], state.pos)[-1]
            state.pos += 1
            state.last = self._pick(seq, rows[seq], state.sampling, state.rng)
            out[seq] = state.last
        return out

    def finish(self, seq: int) -> None:
        state = self._seqs.pop(seq, None)
        keeps = self._keeps(seq)  # a served sequence: its KV state stays in its slot for prefix reuse
        if keeps and state is not None and state.slot is None:  # it was in the batch
            self._unbatch(seq, state.pos)
        batch = self._batch
        if batch is not None and not any(s in self._seqs for s in batch.rows):
            self._release(batch.slot)  # its rows are dropped at the next step otherwise
            self._batch = None
        if keeps:
            return
        slot = self._unbind(seq)
        if slot is None and state is not None and state.slot is not None:
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

    def _release(self, slot: Any) -> None:
        self._reset(slot)
        self._free.append(slot)

    def _step_rows(self, order: list[int]) -> dict[int, np.ndarray]:
        """One token of every active sequence in one inference call over the batch slot."""
        batch = self._rebatch(order)
        states = [self._seqs[s] for s in order]
        lengths = [s.pos for s in states]
        tokens = np.array([[s.last] for s in states], dtype=np.int64)
        positions = np.array([[s.pos] for s in states], dtype=np.int64)
        logits = self._infer(batch.slot, tokens, positions, attention_mask(lengths, batch.cells, 1))
        batch.cells += 1
        return {seq: logits[r, -1] for r, seq in enumerate(order)}

    def _rebatch(self, order: list[int]) -> Batch:
        """The batch slot holding exactly the rows of `order`, repacked if its membership changed."""
        batch = self._batch
        if batch is not None and batch.rows == order:
            return batch
        merged = batch.rows if batch is not None else []
        old = self._snapshot(batch.slot) if batch is not None and any(s in merged for s in order) else {}
        parts = []
        for seq in order:
            state = self._seqs[seq]
            if seq in merged:
                r = merged.index(seq)
                parts.append(({name: a[r : r + 1] for name, a in old.items()}, state.pos))
            else:
                parts.append((self._snapshot(state.slot), state.pos))
        packed, cells = pack(parts)
        slot = batch.slot if batch is not None else (self._free.pop() if self._free else self._new_slot())
        self._restore(slot, packed)
        for seq in order:
            state = self._seqs[seq]
            if state.slot is not None:
                self._reset(state.slot)
                if self._bound.get(seq) is not state.slot:  # a served sequence's slot stays bound to it
                    self._free.append(state.slot)
                state.slot = None
        self._batch = Batch(rows=list(order), slot=slot, cells=cells)
        return self._batch

    def _unbatch(self, seq: int, pos: int) -> None:
        """Copy `seq`'s row of the batch, without its padding, back into the slot bound to it."""
        assert self._batch is not None
        row, cells = self._batch.rows.index(seq), self._batch.cells
        state = self._snapshot(self._batch.slot)
        own = {name: np.ascontiguousarray(a[row : row + 1, :, cells - pos :]) for name, a in state.items()}
        self._restore(self._bound[seq], own)

    def _chunks(self, n: int) -> Iterator[tuple[int, int]]:
        begin = 0
        if self.first_chunk and n > self.first_chunk:
            yield 0, self.first_chunk
            begin = self.first_chunk
        while begin < n:
            end = min(n, begin + self.n_batch)
            yield begin, end
            begin = end
