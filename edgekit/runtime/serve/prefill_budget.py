"""How many prompt tokens a serve step may prefill while other sequences are generating.

Every step that carries prompt tokens delays the token of each running stream by that prefill's time.
With `prefill_chunk = "auto"` (the default) the budget is set from what the steps measured, so that a
step with prompt tokens lasts at most `max_stall` × a decode-only step:

    tokens = (max_stall − 1) × decode step ÷ one prompt token's share of a step

both moving averages of this server's own steps (a decode-only step; a mixed step's time beyond a decode
step, per prompt token in it). The streams' worst gap stays near `max_stall` × their usual gap, whatever
the model, the box and its load; a long prompt's own first token comes later than with large chunks (the
prefill takes more, smaller steps). A number fixes the chunk instead.

MAX_STALL, the default, was chosen on scripts/bench_serve.py's mixed load (three streams decoding when a
~1,370-token prompt arrives), edgekit ÷ llama-server within each run, medians of 3 runs on the 2-core box:

    max_stall                         4       8       16
    default bundle: long TTFT         2.75×   1.49×   0.95×
                    streams' P99 gap  0.14×   0.21×   0.44×
    1.07B probe:    long TTFT         2.27×           1.02×
                    streams' P99 gap  0.12×           0.35×

At 4 the small chunks cost the newcomer over twice llama-server's wait (a chunk of ~20 tokens runs the
matrix kernels far below their batched rate, and every step also pays for a decode); at 16 its first token
comes as soon as llama-server's while the streams' worst gap stays under half of llama-server's, which stops
them for a whole n_batch chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgekit.runtime.config import MAX_STALL

FIRST_GUESS = 8  # prompt tokens of the first mixed step, before a prompt token's cost is known
SMOOTHING = 0.3  # weight of the newest step in the moving averages


def _moving(average: float | None, value: float) -> float:
    return value if average is None else (1 - SMOOTHING) * average + SMOOTHING * value


@dataclass
class PrefillBudget:
    chunk: int | None  # a fixed number of prompt tokens per step; None: from the measured steps
    max_stall: float = MAX_STALL
    decode_s: float | None = None  # a decode-only step
    token_s: float | None = None  # one prompt token's share of a mixed step

    def tokens(self) -> int:
        """Prompt tokens the next step may take beside the running sequences' decode."""
        if self.chunk is not None:
            return self.chunk
        if self.decode_s is None or self.token_s is None:
            return FIRST_GUESS
        return max(1, int((self.max_stall - 1) * self.decode_s / max(self.token_s, 1e-9) + 1e-6))

    def observe(self, seconds: float, decoding: int, prompt_tokens: int) -> None:
        """A step's time, with `decoding` running sequences and `prompt_tokens` prompt tokens in it."""
        if not decoding:
            return  # a prefill-only step (nothing to stall) says nothing about a decode step
        if not prompt_tokens:
            self.decode_s = _moving(self.decode_s, seconds)
        elif self.decode_s is not None:
            self.token_s = _moving(self.token_s, max(0.0, seconds - self.decode_s) / prompt_tokens)
