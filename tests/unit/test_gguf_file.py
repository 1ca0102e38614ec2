"""The shared GGUF reader: one parse per file content, and libraries get it only inside the block."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np

from edgekit._util.gguf_file import libraries_share_readers, read_gguf


def _write(path: Path, name: str) -> None:
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_name(name)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_file_is_parsed_once_until_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _write(path, "first")
    first = read_gguf(path)
    assert read_gguf(str(path)) is first
    assert first.fields["general.name"].contents() == "first"

    _write(path, "second, longer")
    os.utime(path, ns=(1, 1))  # a new modification time even on a coarse clock
    again = read_gguf(path)
    assert again is not first
    assert again.fields["general.name"].contents() == "second, longer"


def test_libraries_get_the_shared_reader_only_inside_the_block(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _write(path, "shared")
    original = gguf.GGUFReader
    with libraries_share_readers():
        assert gguf.GGUFReader(path) is read_gguf(path)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        writable = gguf.GGUFReader(path, "r+")
        assert writable is not read_gguf(path)
    assert gguf.GGUFReader is original
    assert gguf.GGUFReader(path) is not read_gguf(path)
