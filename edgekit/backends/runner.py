"""The validation seam over a runtime engine: validation measures exactly what runs on the box.

Every backend validates through its runtime engine (`logits()` runs the same chunked prefill as `start()`),
configured as the bundle's runtime.toml will configure it; the report's greedy completions run the engine's
own generation loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.runtime.config import RuntimeConfig
from edgekit.runtime.engines import Sampling, load_engine
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

    def detokenize(self, ids: Sequence[int]) -> bytes:
        return bytes(self.engine.detokenize(ids))

    def generate(self, prompt: Sequence[int], stop: Sequence[int], max_new: int) -> list[int]:
        """Greedy decoding through the engine's serving loop (`start`, then `step`), as `edgekit run` does."""
        limit = getattr(self.engine, "n_ctx", len(prompt) + max_new + 1)
        out = [self.engine.start(0, list(prompt), Sampling())]
        try:
            while out[-1] not in stop and len(out) < max_new and len(prompt) + len(out) < limit:
                out.append(self.engine.step()[0])
        finally:
            self.engine.finish(0)
        return out

    def close(self) -> None:
        self.engine.close()
