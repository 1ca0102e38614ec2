"""One parsed header per GGUF file and process.

gguf-py's reader parses every metadata string through numpy views: a 49k-token vocabulary with its merges takes
seconds each time. A build reads the same file's header many times (planning, the tokenizer rebuild, transformers'
GGUF loader, the manifest), so every reader of a given file content is the same object. Readers are read-only
(memory-mapped with mode "r"), so sharing them is safe. A remembered reader keeps its file mapped: use it for
files that stay (a source, a cached artifact), not for a temporary one about to be deleted.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_gguf(path: Path | str) -> Any:
    """The `gguf.GGUFReader` of `path`, parsed once per (file, size, modification time) in this process."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _parsed(resolved, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _parsed(path: Path, size: int, mtime_ns: int) -> Any:
    from gguf.gguf_reader import GGUFReader  # the class itself, never the shared stand-in below

    return GGUFReader(path)


_SHARING = threading.RLock()


@contextlib.contextmanager
def libraries_share_readers() -> Iterator[None]:
    """Within this block, libraries calling gguf-py get shared, read-only results: `gguf.GGUFReader(path)` the
    shared reader (transformers' GGUF loader builds a new one for the config, the weights and the tokenizer: five
    per load), and `gguf.get_tensor_name_map` one map per architecture and depth (transformers builds it again
    for each of a model's modules, 14 ms each: about 400 for a 30-layer model)."""
    import gguf

    def shared_reader(path: Any, mode: Any = "r") -> Any:
        return read_gguf(path) if mode == "r" else original_reader(path, mode)

    with _SHARING:
        original_reader, original_map = gguf.GGUFReader, gguf.get_tensor_name_map
        gguf.GGUFReader, gguf.get_tensor_name_map = shared_reader, _tensor_name_map  # type: ignore[misc,assignment]
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_map  # type: ignore[misc]


@functools.lru_cache(maxsize=16)
def _tensor_name_map(arch: Any, n_blocks: int) -> Any:
    from gguf.tensor_mapping import get_tensor_name_map

    return get_tensor_name_map(arch, n_blocks)
