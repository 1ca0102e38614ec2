"""Log-probabilities in OpenAI's two shapes: completions' `logprobs: N` and chat's `logprobs` + `top_logprobs`.

The engine reports, for each sampled token, the log-softmax of the logits it sampled from (`Logprobs`: ids);
the scheduler turns ids into text and bytes (`describe`) as it decodes, and the handler lays the tokens out:

* completions: `{"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}`;
* chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`.

Streamed, each chunk carries the tokens decoded since the last chunk. Every generated token is listed, those
whose text a stop string cut included; an end-of-generation token is not (it adds no text).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgekit.runtime.engines.base import Logprobs


@dataclass(frozen=True)
class Alternative:
    text: str  # the token's bytes as UTF-8, a partial character replaced by U+FFFD (`raw` has them exactly)
    raw: bytes
    logprob: float


@dataclass(frozen=True)
class TokenLogprobs:
    """One generated token: its text, log-probability, the most likely alternatives, and where its text starts
    in the completion (characters)."""

    sampled: Alternative
    top: tuple[Alternative, ...]
    text_offset: int


@dataclass
class OffsetCounter:
    """Characters of completion text decoded so far, from the tokens' bytes (a character split over tokens
    counts where it completes)."""

    chars: int = 0
    _decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))

    def feed(self, raw: bytes) -> int:
        """The offset at which `raw`'s text starts; counts its characters."""
        start = self.chars
        self.chars += len(self._decoder.decode(raw))
        return start


def describe(sampled: Logprobs, detokenize: Callable[[Sequence[int]], bytes], offsets: OffsetCounter) -> TokenLogprobs:
    def alternative(token: int, logprob: float) -> Alternative:
        raw = detokenize([token])
        return Alternative(raw.decode("utf-8", errors="replace"), raw, logprob)

    chosen = alternative(sampled.token, sampled.logprob)
    top = tuple(alternative(token, logprob) for token, logprob in sampled.top)
    return TokenLogprobs(chosen, top, offsets.feed(chosen.raw))


def completion_logprobs(tokens: Sequence[TokenLogprobs]) -> dict[str, list[Any]]:
    """OpenAI's completions shape (alternatives with the same text keep the likelier one)."""
    top: list[dict[str, float]] = []
    for token in tokens:
        entry: dict[str, float] = {}
        for alt in token.top:
            entry.setdefault(alt.text, alt.logprob)
        top.append(entry)
    return {
        "tokens": [t.sampled.text for t in tokens],
        "token_logprobs": [t.sampled.logprob for t in tokens],
        "top_logprobs": top,
        "text_offset": [t.text_offset for t in tokens],
    }


def chat_logprobs(tokens: Sequence[TokenLogprobs]) -> dict[str, Any]:
    """OpenAI's chat shape."""

    def entry(alt: Alternative) -> dict[str, Any]:
        return {"token": alt.text, "logprob": alt.logprob, "bytes": list(alt.raw)}

    content = [{**entry(t.sampled), "top_logprobs": [entry(a) for a in t.top]} for t in tokens]
    return {"content": content, "refusal": None}


def layout(tokens: Sequence[TokenLogprobs], chat: bool) -> dict[str, Any]:
    return chat_logprobs(tokens) if chat else completion_logprobs(tokens)
