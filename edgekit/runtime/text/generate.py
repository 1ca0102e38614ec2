"""One completion, streamed: what `edgekit run` does (serve uses the scheduler instead)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from edgekit.errors import UsageError
from edgekit.runtime.engines import Engine, Sampling
from edgekit.runtime.text.stream import TextStream


@dataclass
class Completion:
    prompt_tokens: int
    completion_tokens: int = 0
    finish_reason: str | None = None  # stop | length
    ttft_s: float | None = None
    seconds: float = 0.0
    text: str = ""
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def decode_tok_s(self) -> float | None:
        decode = self.seconds - (self.ttft_s or 0.0)
        return (self.completion_tokens - 1) / decode if self.completion_tokens > 1 and decode > 0 else None


def stream(
    engine: Engine,
    prompt_ids: list[int],
    *,
    max_tokens: int,
    sampling: Sampling,
    stop: list[str] | None = None,
    n_ctx: int | None = None,
    result: Completion | None = None,
) -> Iterator[str]:
    """Yield text as it is generated; fill `result` with counts and timings."""
    done = result if result is not None else Completion(len(prompt_ids))
    done.prompt_tokens = len(prompt_ids)
    limit = n_ctx or getattr(engine, "n_ctx", None)
    if limit is not None and len(prompt_ids) + max_tokens > limit:
        raise UsageError(
            f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) exceeds the context of {limit}",
            "shorten the prompt, lower --max-tokens, or raise n_ctx in runtime.local.toml",
        )
    text = TextStream(stop)
    started = time.perf_counter()
    token = engine.start(0, prompt_ids, sampling)
    done.ttft_s = time.perf_counter() - started
    try:
        while True:
            if token in engine.eos_ids:
                done.finish_reason = "stop"
                break
            done.completion_tokens += 1
            piece = text.feed(engine.detokenize([token]))
            if piece:
                yield piece
            if text.stopped:
                done.finish_reason = "stop"
                break
            if done.completion_tokens >= max_tokens:
                done.finish_reason = "length"
                break
            token = engine.step()[0]
        tail = text.flush()
        if tail:
            yield tail
    finally:
        engine.finish(0)
        done.seconds = time.perf_counter() - started
        done.text = text.text
