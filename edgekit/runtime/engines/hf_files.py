"""What an OpenVINO or ONNX artifact folder carries beside the model: the Hugging Face side files.

`config.json`, `generation_config.json`, `tokenizer_config.json`, `chat_template.jinja` and (ONNX)
`tokenizer.json` are read here with the standard library only: the box needs neither transformers
nor torch. Also the token → bytes table for `tokenizers`-based detokenization, because the engine
contract returns bytes (a token may end inside a UTF-8 character) and `tokenizers` only returns text.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from edgekit.errors import EngineError

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or {} when the file is absent."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EngineError(f"{path} is not valid JSON ({exc})", "run `edgekit verify` on the bundle") from None
    return data if isinstance(data, dict) else {}


def _ids(value: Any) -> set[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()


class HFFiles:
    """The side files of one artifact folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.config = read_json(folder / "config.json")
        self.generation = read_json(folder / "generation_config.json")
        self.tokenizer_config = read_json(folder / "tokenizer_config.json")

    @property
    def special_tokens(self) -> dict[int, str]:
        """id → text of the tokens marked special (their text is a control marker, not content)."""
        found: dict[int, str] = {}
        for key, entry in (self.tokenizer_config.get("added_tokens_decoder") or {}).items():
            if isinstance(entry, dict) and entry.get("special") and str(key).isdigit():
                found[int(key)] = str(entry.get("content", ""))
        return found

    def token_id(self, text: str | None) -> int | None:
        if not text:
            return None
        return next((i for i, t in self.special_tokens.items() if t == text), None)

    def _named(self, name: str) -> str | None:
        value = self.tokenizer_config.get(name)
        if isinstance(value, dict):  # {"content": "<s>", ...} in older tokenizer configs
            value = value.get("content")
        return value if isinstance(value, str) else None

    @property
    def eos_ids(self) -> frozenset[int]:
        """End-of-generation ids: generation_config (may be a list), config and the tokenizer's eos token."""
        ids = _ids(self.generation.get("eos_token_id")) | _ids(self.config.get("eos_token_id"))
        eos = self.token_id(self._named("eos_token"))
        if eos is not None:
            ids.add(eos)
        return frozenset(ids)

    @property
    def bos_id(self) -> int | None:
        for value in (self.generation.get("bos_token_id"), self.config.get("bos_token_id")):
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return self.token_id(self._named("bos_token"))

    @property
    def add_bos(self) -> bool:
        """Whether a plain prompt starts with BOS (the tokenizer's `add_bos_token`)."""
        return bool(self.tokenizer_config.get("add_bos_token", False)) and self.bos_id is not None

    @property
    def chat_template(self) -> str | None:
        jinja = self.folder / "chat_template.jinja"
        if jinja.is_file():
            return jinja.read_text(encoding="utf-8")
        value = self.tokenizer_config.get("chat_template")
        if isinstance(value, str):
            return value
        if isinstance(value, list):  # [{"name": "default", "template": "..."}, ...]
            named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
            return template if isinstance(template, str) else None
        return None


@cache
def _unicode_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's byte → printable character table used by byte-level BPE vocabularies."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _decoder_types(decoder: Any) -> list[dict[str, Any]]:
    if not isinstance(decoder, dict):
        return []
    if decoder.get("type") == "Sequence":
        return [d for sub in decoder.get("decoders", []) for d in _decoder_types(sub)]
    return [decoder]


def token_bytes_table(tokenizer_json: Path, vocab_size: int) -> list[bytes]:
    """For each token id, the bytes it stands for; special tokens map to b'' (as llama.cpp renders them).

    Handles byte-level BPE (GPT-2 style vocabularies) and SentencePiece-style vocabularies (`▁` for a
    space, `<0xNN>` byte-fallback tokens), which between them cover the Hugging Face tokenizers LLMs use.
    """
    data = read_json(tokenizer_json)
    model = data.get("model") or {}
    decoders = _decoder_types(data.get("decoder"))
    kinds = {d.get("type") for d in decoders}
    byte_level = "ByteLevel" in kinds
    replacement = "▁"
    for d in decoders:
        if d.get("type") == "Metaspace":
            replacement = str(d.get("replacement", replacement))
    vocab: dict[str, int] = {}
    raw_vocab = model.get("vocab")
    if isinstance(raw_vocab, dict):
        vocab = {str(k): int(v) for k, v in raw_vocab.items()}
    elif isinstance(raw_vocab, list):  # Unigram: [[piece, score], ...]
        vocab = {str(entry[0]): i for i, entry in enumerate(raw_vocab)}
    table = [b""] * vocab_size
    to_byte = _unicode_to_byte()
    for token, idx in vocab.items():
        if not 0 <= idx < vocab_size:
            continue
        if byte_level:
            table[idx] = bytes(to_byte[c] for c in token) if all(c in to_byte for c in token) else token.encode()
        elif (m := _BYTE_TOKEN.match(token)) is not None:
            table[idx] = bytes([int(m.group(1), 16)])
        else:
            table[idx] = token.replace(replacement, " ").encode("utf-8")
    for added in data.get("added_tokens") or []:
        idx = int(added.get("id", -1))
        if 0 <= idx < vocab_size:
            table[idx] = b"" if added.get("special") else str(added.get("content", "")).encode("utf-8")
    return table
