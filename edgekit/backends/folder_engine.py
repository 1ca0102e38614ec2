"""What the OpenVINO and ONNX Runtime engines share: an artifact folder (the model, its tokenizer, the Hugging
Face side files) opened as a stepwise engine, configured by runtime.toml (a `RuntimeConfig`).

A subclass loads its model (`_load_model`, timed as `model_ms`), compiles it for a thread count (`_compile`,
again on `set_threads`) and loads its tokenizer (`_load_tokenizer`, timed as `context_ms`). Box-safe: it
imports only the runtime.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, Self

from edgekit.errors import UsageError
from edgekit.runtime.config import RuntimeConfig
from edgekit.runtime.engines.stepwise import StepwiseEngine


class FolderEngine(StepwiseEngine, ABC):
    files: ClassVar[tuple[str, ...]]  # what the artifact folder must hold
    kind: ClassVar[str]  # the format, as a missing file names it ("OpenVINO", "ONNX")

    def __init__(self, folder: Path, config: RuntimeConfig) -> None:
        self._open_folder(folder, self.files, self.kind)
        self._init_sequences(config.max_concurrent, config.n_ctx, config.n_batch, config.prefix_cache)
        self._config = config
        started = time.perf_counter()
        self._load_model(config)
        loaded = time.perf_counter()
        self._load_tokenizer()
        self.load_timings = {"model_ms": (loaded - started) * 1000, "context_ms": (time.perf_counter() - loaded) * 1000}

    @classmethod
    def open(cls, artifact: Path, bundle: Path | None, config: RuntimeConfig) -> Self:
        """The registry's `open_engine`: the artifact folder carries the tokenizer and the chat template."""
        del bundle
        return cls(artifact, config)

    @abstractmethod
    def _load_model(self, config: RuntimeConfig) -> None:
        """Read and check the model, set `n_vocab`, and `_compile` it for `config.n_threads`."""

    @abstractmethod
    def _compile(self, n_threads: int) -> None:
        """Make the model ready to run on `n_threads` threads (set `n_threads`, `n_threads_batch`, `properties`)."""

    @abstractmethod
    def _load_tokenizer(self) -> None:
        """Load the tokenizer and read the vocabulary (`_read_vocabulary`)."""

    def set_threads(self, n_threads: int, n_threads_batch: int) -> None:
        """Compile again with another thread count (one count for prompt and decode); needs an idle engine."""
        del n_threads_batch
        if self._seqs:
            raise UsageError("set_threads() needs an idle engine", "finish every active sequence first")
        self._drop_slots()
        self._compile(n_threads)
