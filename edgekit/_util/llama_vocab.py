"""llama.cpp's tokenizer through llama-cpp-python's C API, shared by the build side and the box's engine."""

from __future__ import annotations

import ctypes
from typing import Any


def llama_tokenize(llama: Any, vocab: Any, data: bytes, *, special: bool) -> list[int]:
    """The token ids llama.cpp cuts `data` (UTF-8) into with `vocab`; `special`: parse special tokens' text.
    `llama`: the `llama_cpp` module (passed in, so importing this needs no llama.cpp)."""
    capacity = len(data) + 8
    buf = (llama.llama_token * capacity)()
    n = llama.llama_tokenize(vocab, data, len(data), buf, capacity, False, special)
    if n < 0:  # never more tokens than bytes, but follow the API's contract
        capacity = -n
        buf = (llama.llama_token * capacity)()
        n = llama.llama_tokenize(vocab, data, len(data), buf, capacity, False, special)
    return list(buf[:n])


def llama_piece(llama: Any, vocab: Any, token: int, *, special: bool) -> bytes:
    """The bytes token `token` stands for; `special`: a special token's own text (else nothing for it)."""
    buf = ctypes.create_string_buffer(64)
    n = llama.llama_token_to_piece(vocab, int(token), buf, len(buf), 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama.llama_token_to_piece(vocab, int(token), buf, len(buf), 0, special)
    return buf.raw[:n]
