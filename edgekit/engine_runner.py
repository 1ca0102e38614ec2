"""The validation seam over a runtime engine: validation measures exactly what runs on the box.

The OpenVINO and ONNX Runtime backends validate through their runtime engines (`logits()` runs the
same chunked prefill as `start()`), configured as the box's runtime.toml would be by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.runtime.config import RuntimeConfig
from edgekit.runtime.engines import load_engine
from edgekit.runtime.machine import physical_cores


class EngineRunner:
    def __init__(self, backend: str, artifact: Path, n_ctx: int, threads: int | None = None, **config: Any) -> None:
        threads = threads or physical_cores()
        # use_mmap: OpenVINO's ENABLE_MMAP, the weights stay file-backed while the artifact is validated.
        settings = {"artifact": artifact.name, "n_threads": threads, "n_threads_batch": threads,
                    "n_ctx": max(64, n_ctx), "max_concurrent": 1, "use_mmap": True, **config}  # fmt: skip
        self.name = artifact.name
        self.engine: Any = load_engine(backend, artifact, None, RuntimeConfig(**settings))

    @property
    def vocab_size(self) -> int:
        return int(self.engine.n_vocab)

    def tokenize(self, text: str) -> list[int]:
        # As the reference tokenizer (transformers) does: special-token text in the input is parsed.
        return self.engine.tokenize(text, special=True)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        return self.engine.logits(ids)

    def close(self) -> None:
        self.engine.close()
