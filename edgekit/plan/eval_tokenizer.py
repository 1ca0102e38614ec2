"""Which tokenizer cuts the eval and calibration text into the ids of a build, and that tokenizer, open for the plan.

A GGUF source whose every target is a GGUF is scored on llama.cpp's own ids of the file: those artifacts
tokenize with it on the box, the torch reference reads only ids, and no Hugging Face tokenizer is asked for
(the one transformers rebuilds from GGUF metadata can cut text otherwise, as Gemma 3's does). Every other
build is scored on the Hugging Face tokenizer's ids (`edgekit.sources.tokenizer.reference_tokenizer`); for a
GGUF source, a target that exports from that tokenizer is refused when it disagrees with llama.cpp
(`edgekit.plan.tokenizer_check`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from edgekit._util.versions import dist_version
from edgekit.backends.catalog import build_backend
from edgekit.plan.tasks import FetchTask
from edgekit.recipe.targets import Target
from edgekit.sources.gguf import LlamaCppTokenizer, llama_cpp_tokenizer
from edgekit.sources.tokenizer import TokenizerKind, reference_tokenizer


class EvalTokenizer(Protocol):
    """What the eval data asks of a tokenizer (`edgekit.sources.tokenizer.HFTokenizer` is one)."""

    def tokenize(self, text: str) -> list[int]: ...

    def tokenize_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]: ...

    @property
    def prefix_token_id(self) -> int | None: ...

    @property
    def stop_ids(self) -> list[int]: ...

    def chat_prompt_ids(self, text: str) -> list[int] | None: ...


def ids_tokenizer(fetch: FetchTask, targets: Sequence[Target]) -> TokenizerKind:
    """llama.cpp's reading of the source when it is a GGUF and every target converts it as it is."""
    if fetch.kind == "gguf" and all(build_backend(t.backend).converts_gguf for t in targets):
        return TokenizerKind.LLAMA_CPP
    return TokenizerKind.HUGGING_FACE


def tokenizer_versions(kind: TokenizerKind) -> dict[str, str | None]:
    """The libraries whose tokenization the ids are: part of what a remembered tokenization is keyed by."""
    if kind is TokenizerKind.LLAMA_CPP:
        return {"llama-cpp-python": dist_version("llama-cpp-python")}
    return {"transformers": dist_version("transformers"), "tokenizers": dist_version("tokenizers")}


@contextmanager
def open_tokenizer(fetch: FetchTask, kind: TokenizerKind) -> Iterator[EvalTokenizer]:
    if kind is TokenizerKind.LLAMA_CPP:
        with llama_cpp_tokenizer(Path(fetch.location)) as tokenizer:
            yield LlamaCppEvalTokenizer(tokenizer)
        return
    tokenizer_dir = fetch.tokenizer.location if fetch.tokenizer else ""
    yield reference_tokenizer(fetch.kind, fetch.uri, fetch.location, fetch.revision, tokenizer_dir)


class LlamaCppEvalTokenizer:
    """llama.cpp's tokenizer of the source GGUF, with chat prompts rendered and stopped as the GGUF engine does."""

    def __init__(self, tokenizer: LlamaCppTokenizer) -> None:
        self._tokenizer = tokenizer

    def tokenize(self, text: str) -> list[int]:
        return self._tokenizer.tokenize(text)

    def tokenize_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        return self._tokenizer.tokenize_with_offsets(text)

    @property
    def prefix_token_id(self) -> int | None:
        """What lm-evaluation-harness conditions an empty context on: BOS, else EOS."""
        bos = self._tokenizer.bos_id
        return bos if bos is not None else self._tokenizer.eos_id

    @property
    def stop_ids(self) -> list[int]:
        return list(self._tokenizer.eog_ids)

    def chat_prompt_ids(self, text: str) -> list[int] | None:
        """`text` as one user turn in the GGUF's chat template (`edgekit.runtime.text.prompt.chat_text`)."""
        from edgekit.runtime.text import chat

        tokenizer = self._tokenizer
        if not tokenizer.chat_template:
            return None
        eos = tokenizer.eos_id
        bos = tokenizer.bos_id if tokenizer.bos_id is not None else eos
        bos_token = tokenizer.token_text(bos) if bos is not None else ""
        eos_token = tokenizer.token_text(eos) if eos is not None else ""
        messages = [{"role": "user", "content": text}]
        rendered = chat.render(tokenizer.chat_template, messages, bos_token=bos_token, eos_token=eos_token)
        return tokenizer.tokenize(rendered)
