"""The llama.cpp engine: batched decoding of up to 4 sequences in one context, with llama-cpp-python.

One `llama_context` holds `max_sequences` KV streams (`kv_unified = false`, `n_ctx` cells each).
`step()` puts the last token of every active sequence into one `llama_batch` (one entry per
sequence, each with its own `seq_id` and position) and calls `llama_decode` once, so the weights
are read from memory once per step for all of them. `finish()` removes the sequence's cells with
`llama_memory_seq_rm`. Sampling happens in numpy (`edgekit.runtime.engines.sampling`).

llama.cpp runs a batch of one token with `n_threads` and anything larger with `n_threads_batch`;
a batched decode step is still a decode (memory-bound), so the engine switches the context to the
decode thread count for steps of several sequences and back for prompts.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._util.llama_vocab import llama_piece, llama_tokenize
from edgekit.backends.gguf.grammar import GrammarMixin
from edgekit.backends.gguf.serving import PREFIX_CACHE, ServingMixin
from edgekit.errors import EngineError, UsageError
from edgekit.runtime.engines.base import Sampling, VocabularyMixin, checked_prompt
from edgekit.runtime.engines.sampling import new_rng

MAX_SEQUENCES = 4
NUMACTL_ENV = "EDGEKIT_NUMACTL"  # set by run.sh when it started us under numactl

_init_lock = threading.Lock()
_numa_initialised: int | None = None


def _llama() -> Any:
    import llama_cpp
    from llama_cpp._logger import set_verbose

    set_verbose(os.environ.get("EDGEKIT_DEBUG", "") not in ("", "0"))
    return llama_cpp


def numa_strategy(policy: str) -> int:
    """llama.cpp's ggml_numa_strategy for a runtime.toml `numa` policy."""
    llama_cpp = _llama()
    if policy == "isolate":
        if os.environ.get(NUMACTL_ENV):  # numactl already bound CPUs and memory: follow its CPU set
            return llama_cpp.GGML_NUMA_STRATEGY_NUMACTL
        return llama_cpp.GGML_NUMA_STRATEGY_ISOLATE
    if policy == "distribute":
        return llama_cpp.GGML_NUMA_STRATEGY_DISTRIBUTE
    return llama_cpp.GGML_NUMA_STRATEGY_DISABLED


def _init_backend(policy: str) -> Any:
    """llama_backend_init and llama_numa_init, once per process (NUMA setup is process-wide)."""
    global _numa_initialised
    llama_cpp = _llama()
    with _init_lock:
        if _numa_initialised is None:
            llama_cpp.llama_backend_init()
            strategy = numa_strategy(policy)
            if strategy != llama_cpp.GGML_NUMA_STRATEGY_DISABLED:
                llama_cpp.llama_numa_init(strategy)
            _numa_initialised = strategy
    return llama_cpp


def initialise() -> None:
    """llama.cpp loaded and initialised (what `edgekit bench` does before its load timers start)."""
    _init_backend("none")


def load_mode(use_mmap: bool, use_mlock: bool) -> int:
    llama_cpp = _llama()
    if use_mmap and use_mlock:
        return llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
    if use_mlock:
        return llama_cpp.LLAMA_LOAD_MODE_MLOCK
    return llama_cpp.LLAMA_LOAD_MODE_MMAP if use_mmap else llama_cpp.LLAMA_LOAD_MODE_NONE


@dataclass
class _Sequence:
    pos: int  # cells used: the next token goes to this position
    last: int  # the token to feed at the next step
    sampling: Sampling
    rng: np.random.Generator


class GGUFEngine(GrammarMixin, ServingMixin, VocabularyMixin):
    backend = "gguf"
    _model: Any  # llama.cpp's handles (ctypes pointers, a llama_batch): None until loaded, and after close()
    _ctx: Any
    _batch: Any
    _threads_now: tuple[int, int]

    def __init__(
        self,
        path: Path,
        *,
        n_threads: int,
        n_threads_batch: int,
        n_ctx: int = 2048,
        n_batch: int = 256,
        max_sequences: int = 1,
        use_mmap: bool = True,
        use_mlock: bool = False,
        numa: str = "none",
        prefix_cache: int = PREFIX_CACHE,
    ) -> None:
        if not 1 <= max_sequences <= MAX_SEQUENCES:
            raise UsageError(f"max_sequences is {max_sequences}", f"use 1 to {MAX_SEQUENCES}")
        self._llama = llama_cpp = _init_backend(numa)
        self.path = Path(path)
        self.max_sequences = max_sequences
        self.n_threads, self.n_threads_batch = n_threads, n_threads_batch
        self._prefix_capacity = prefix_cache
        self._model = self._ctx = self._batch = None
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = 0
        params.load_mode = load_mode(use_mmap, use_mlock)
        started = time.perf_counter()
        self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        loaded = time.perf_counter()
        if not self._model:
            raise EngineError(
                f"llama.cpp could not load {self.path}",
                "check that the file is a complete GGUF (run `edgekit verify` on the bundle); "
                "set EDGEKIT_DEBUG=1 to see llama.cpp's log",
            )
        self._read_vocabulary()
        self._new_context(n_ctx, n_batch)
        self.load_timings = {"model_ms": (loaded - started) * 1000, "context_ms": (time.perf_counter() - loaded) * 1000}

    def _read_vocabulary(self) -> None:
        llama_cpp = self._llama
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self.bos_id = int(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_id = int(llama_cpp.llama_vocab_eos(self._vocab))
        self._eos = frozenset(i for i in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, i))
        template = llama_cpp.llama_model_chat_template(self._model, None)
        self._template = template.decode("utf-8") if template else None

    def _new_context(self, n_ctx: int, n_batch: int) -> None:
        """One context of `max_sequences` KV streams of `n_ctx` cells each (KV cache and compute buffers)."""
        llama_cpp, sequences = self._llama, self.max_sequences
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx * sequences
        params.n_batch = params.n_ubatch = max(n_batch, sequences)
        params.n_seq_max = sequences
        params.kv_unified = False  # one KV stream per sequence: no attention over other sequences' cells
        params.n_threads, params.n_threads_batch = self.n_threads, self.n_threads_batch
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            self.close()
            raise EngineError(
                f"llama.cpp could not create a context of {n_ctx} × {sequences} tokens",
                "lower n_ctx or max_concurrent in runtime.local.toml (memory)",
            )
        self.n_batch = int(params.n_batch)
        self.n_ctx = int(llama_cpp.llama_n_ctx_seq(self._ctx))  # cells per sequence
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._threads_now = (self.n_threads, self.n_threads_batch)
        self._seqs: dict[int, _Sequence] = {}
        self._init_serving(self._prefix_capacity)
        self._init_grammar()

    # --- the Engine protocol --------------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UsageError(f"text is not valid UTF-8 ({exc.reason} at {exc.start})", "send UTF-8 text") from None
        return llama_tokenize(self._llama, self._vocab, data, special=special)

    def detokenize(self, ids: Sequence[int]) -> bytes:
        return b"".join(llama_piece(self._llama, self._vocab, token, special=False) for token in ids)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        if self._seqs or self._prefills:
            raise UsageError("logits() needs an idle engine", "finish every active sequence first")
        ids = list(ids)
        if not 0 < len(ids) <= self.n_ctx:
            raise UsageError(f"logits() of {len(ids)} tokens", f"pass 1 to {self.n_ctx} tokens (n_ctx)")
        self._set_threads(self.n_threads, self.n_threads_batch)
        self._clear_slot(0)
        out = np.empty((len(ids), self.n_vocab), dtype=np.float32)
        try:
            for start in range(0, len(ids), self.n_batch):
                chunk = ids[start : start + self.n_batch]
                self._fill([(t, start + i, 0, True) for i, t in enumerate(chunk)])
                self._decode()
                view = np.ctypeslib.as_array(self._llama.llama_get_logits(self._ctx), shape=(len(chunk), self.n_vocab))
                out[start : start + len(chunk)] = view
        finally:
            self._llama.llama_memory_seq_rm(self._memory, 0, -1, -1)
        return out

    def start(self, seq: int, prompt_ids: Sequence[int], sampling: Sampling) -> int:
        ids = checked_prompt(seq, prompt_ids, self.max_sequences, self._seqs, self.n_ctx)
        self._set_threads(self.n_threads, self.n_threads_batch)
        self._clear_slot(seq)
        self._drop_grammar(seq)
        try:
            for begin in range(0, len(ids), self.n_batch):
                chunk = ids[begin : begin + self.n_batch]
                last_chunk = begin + len(chunk) == len(ids)
                self._fill([(t, begin + i, seq, last_chunk and i == len(chunk) - 1) for i, t in enumerate(chunk)])
                self._decode()
        except BaseException:
            self._llama.llama_memory_seq_rm(self._memory, seq, -1, -1)
            raise
        state = _Sequence(pos=len(ids), last=-1, sampling=sampling, rng=new_rng(sampling))
        state.last = self._pick(seq, self._logits_row(len(chunk) - 1), sampling, state.rng)
        self._seqs[seq] = state
        return state.last

    def step(self) -> dict[int, int]:
        if not self._seqs:
            return {}
        order = sorted(self._seqs)
        for seq in order:
            if self._seqs[seq].pos >= self.n_ctx:
                raise UsageError(
                    f"sequence {seq} filled its context of {self.n_ctx} tokens",
                    "finish it; callers must stop at n_ctx (prompt + generated tokens)",
                )
        if len(order) > 1:  # a batched decode step: still memory-bound, use the decode thread count
            self._set_threads(self.n_threads, self.n_threads)
        else:
            self._set_threads(self.n_threads, self.n_threads_batch)
        self._fill([(self._seqs[s].last, self._seqs[s].pos, s, True) for s in order])
        self._decode()
        out: dict[int, int] = {}
        for i, seq in enumerate(order):
            state = self._seqs[seq]
            state.pos += 1
            state.last = self._pick(seq, self._logits_row(i), state.sampling, state.rng)
            out[seq] = state.last
        return out

    def finish(self, seq: int) -> None:
        kept = self._end_serving(seq)  # a served sequence's cells stay for prefix reuse
        self._drop_grammar(seq)
        if self._seqs.pop(seq, None) is not None and self._memory is not None and not kept:
            self._llama.llama_memory_seq_rm(self._memory, seq, -1, -1)

    def close(self) -> None:
        llama_cpp = self._llama
        self._drop_grammars()
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
        self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
        self._model = None
        self._memory = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the library may already be gone
            self.close()

    # --- extras used by bench, tune and the chat template ---------------------------------------

    def token_text(self, token: int) -> str:
        """The vocabulary's text of a token, special tokens included (e.g. '<|im_end|>')."""
        text = self._llama.llama_vocab_get_text(self._vocab, int(token))
        return text.decode("utf-8", errors="replace") if text else ""

    @property
    def active(self) -> list[int]:
        return sorted(self._seqs)

    def set_threads(self, n_threads: int, n_threads_batch: int) -> None:
        """Change the thread counts of the loaded context (the thread sweep uses one load for all)."""
        self.n_threads, self.n_threads_batch = n_threads, n_threads_batch
        self._set_threads(n_threads, n_threads_batch)

    # --- internals ----------------------------------------------------------------------------

    def _clear_slot(self, seq: int) -> None:
        """A cold start: no cells of an earlier sequence in `seq`'s stream."""
        self._llama.llama_memory_seq_rm(self._memory, seq, -1, -1)
        self._prefix.forget(seq)

    def _begin_sequence(self, seq: int, pos: int, last: int, sampling: Sampling, rng: np.random.Generator) -> None:
        self._seqs[seq] = _Sequence(pos=pos, last=last, sampling=sampling, rng=rng)

    def _set_threads(self, n_threads: int, n_threads_batch: int) -> None:
        if self._threads_now != (n_threads, n_threads_batch):
            self._llama.llama_set_n_threads(self._ctx, n_threads, n_threads_batch)
            self._threads_now = (n_threads, n_threads_batch)

    def _fill(self, items: list[tuple[int, int, int, bool]]) -> None:
        batch = self._batch
        batch.n_tokens = len(items)
        for i, (token, pos, seq, want_logits) in enumerate(items):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = want_logits

    def _decode(self) -> None:
        code = self._llama.llama_decode(self._ctx, self._batch)
        if code == 1:
            raise EngineError("llama.cpp found no free KV cache slot", "lower max_concurrent or shorten requests")
        if code != 0:
            raise EngineError(f"llama_decode failed with code {code}", "set EDGEKIT_DEBUG=1 to see llama.cpp's log")

    def _logits_row(self, i: int) -> np.ndarray:
        pointer = self._llama.llama_get_logits_ith(self._ctx, i)
        if not pointer:
            raise EngineError(f"llama.cpp returned no logits for batch entry {i}", "this is a bug in edgekit")
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))


def open_engine(artifact: Path, bundle: Path | None, config: Any) -> GGUFEngine:
    """A GGUF engine configured by a RuntimeConfig (threads, mmap/mlock, context, batch, concurrency, NUMA)."""
    del bundle  # everything a GGUF engine needs (tokenizer, chat template) is inside the file
    return GGUFEngine(
        artifact,
        n_threads=config.n_threads,
        n_threads_batch=config.n_threads_batch,
        n_ctx=config.n_ctx,
        n_batch=config.n_batch,
        max_sequences=config.max_concurrent,
        use_mmap=config.use_mmap,
        use_mlock=config.use_mlock,
        numa=config.numa,
        prefix_cache=getattr(config, "prefix_cache", PREFIX_CACHE),
    )
