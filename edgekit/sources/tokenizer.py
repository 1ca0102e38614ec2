"""The tokenizers every token id of a build comes from: a Hugging Face tokenizer, or llama.cpp's reading of a GGUF.

The Hugging Face tokenizer is loaded at planning time from what the fetch stage will put in the checkpoint:
the tokenizer files of a local folder or of an hf:// snapshot (downloaded alone, without weights), or the
tokenizer a GGUF source's metadata describes (rebuilt the way the fetch stage rebuilds it). When every target
of a GGUF source is a GGUF, the ids come from the source file itself, as llama.cpp reads it
(`edgekit.sources.gguf.LlamaCppTokenizer`): what those artifacts tokenize with on the box.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from edgekit.sources import hub

# The files a Hugging Face tokenizer is made of (and what `[model] tokenizer` takes from its folder).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json")  # fmt: skip


class TokenizerKind(StrEnum):
    """Which tokenizer cut the eval (and calibration) text into the ids every stage scores."""

    HUGGING_FACE = "huggingface"
    LLAMA_CPP = "llama.cpp"

    @property
    def label(self) -> str:
        """How the report and the manifest name it."""
        return "llama.cpp (source GGUF)" if self is TokenizerKind.LLAMA_CPP else "Hugging Face tokenizer"


class HFTokenizer:
    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    @classmethod
    def from_folder(cls, folder: Path) -> HFTokenizer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(folder))

    def tokenize(self, text: str) -> list[int]:
        return list(self._tokenizer(text, add_special_tokens=False).input_ids)

    @property
    def prefix_token_id(self) -> int | None:
        """What lm-evaluation-harness conditions an empty context on: BOS, else EOS."""
        tok = self._tokenizer
        return tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id

    @property
    def stop_ids(self) -> list[int]:
        return [self._tokenizer.eos_token_id] if self._tokenizer.eos_token_id is not None else []

    def chat_prompt_ids(self, text: str) -> list[int] | None:
        """`text` as one user turn in the model's chat template, ready for the reply; None without a template."""
        if not getattr(self._tokenizer, "chat_template", None):
            return None
        messages = [{"role": "user", "content": text}]
        return list(self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))

    def tokenize_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoded = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(encoded.input_ids), [tuple(o) for o in encoded.offset_mapping]


def reference_tokenizer(kind: str, uri: str, location: str, revision: str | None, tokenizer: str = "") -> HFTokenizer:
    """The tokenizer the checkpoint of this source will carry (`tokenizer`: the folder of `[model] tokenizer`)."""
    if tokenizer:
        return HFTokenizer.from_folder(Path(tokenizer))
    if kind == "gguf":
        from edgekit.sources.gguf import hf_tokenizer_from_gguf

        return HFTokenizer(hf_tokenizer_from_gguf(Path(location)))
    if kind == "hf":
        return HFTokenizer.from_folder(hub.download(uri, revision, hub.SMALL_PATTERNS))
    return HFTokenizer.from_folder(Path(location))
