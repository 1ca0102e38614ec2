"""The tensors of a safetensors checkpoint, read one at a time through read-only memory maps.

The safetensors library maps a whole file, writable and private, as soon as it is opened: harmless
for the page cache, but every byte of it counts against RLIMIT_DATA and the kernel's commit charge,
so a 16 GB checkpoint "uses" 16 GB of a process's allowance before a tensor is read. Like llama.cpp's
converter (gguf-py `SafetensorsLocal`, for the same reason), this reads the format's header itself (8
bytes of header length, then JSON: name → dtype, shape, data offsets) and maps only the bytes of the
tensor asked for, read-only: its pages are file-backed and the kernel may drop them at any time.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

# safetensors dtype → (numpy dtype the bytes are mapped as, torch dtype name they are viewed as)
DTYPES = {
    "F64": (np.float64, "float64"),
    "F32": (np.float32, "float32"),
    "F16": (np.float16, "float16"),
    "BF16": (np.uint16, "bfloat16"),
    "I64": (np.int64, "int64"),
    "I32": (np.int32, "int32"),
    "I16": (np.int16, "int16"),
    "I8": (np.int8, "int8"),
    "U8": (np.uint8, "uint8"),
    "BOOL": (np.bool_, "bool"),
}
LAYER = re.compile(r"\.layers\.(\d+)\.")


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str  # as safetensors spells it: "F16", "BF16", ...
    shape: tuple[int, ...]
    offset: int  # from the start of the file
    nbytes: int

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


def read_header(path: Path) -> dict[str, TensorInfo]:
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    start = 8 + length
    found = {}
    for name, meta in header.items():
        if name != "__metadata__":
            begin, end = meta["data_offsets"]
            found[name] = TensorInfo(path, meta["dtype"], tuple(meta["shape"]), start + begin, end - begin)
    return found


class CheckpointTensors:
    """Every tensor of a checkpoint folder's *.safetensors files (sharded or not), by name."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.tensors: dict[str, TensorInfo] = {}
        for path in sorted(folder.glob("*.safetensors")):
            self.tensors.update(read_header(path))

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def unsupported(self) -> list[str]:
        return sorted({t.dtype for t in self.tensors.values() if t.dtype not in DTYPES})

    def layer_numels(self) -> dict[int, int]:
        """Parameters of each numbered decoder layer (`….layers.N.…`)."""
        numels: dict[int, int] = {}
        for name, info in self.tensors.items():
            if found := LAYER.search(name):
                numels[int(found.group(1))] = numels.get(int(found.group(1)), 0) + info.numel
        return numels

    def outside_layers(self) -> dict[str, int]:
        """Parameters of each tensor outside the decoder layers (embedding, final norm, head)."""
        return {name: info.numel for name, info in self.tensors.items() if not LAYER.search(name)}

    def load(self, name: str) -> torch.Tensor:
        """The tensor `name`, backed by a read-only map of its bytes (copy it before writing to it)."""
        import torch

        info = self.tensors[name]
        mapped_as, viewed_as = DTYPES[info.dtype]
        if info.nbytes == 0:
            return torch.empty(info.shape, dtype=getattr(torch, viewed_as))
        raw: Any = np.memmap(info.file, dtype=np.uint8, mode="r", offset=info.offset, shape=(info.nbytes,))
        if info.offset % np.dtype(mapped_as).itemsize:  # torch needs aligned data: copy the rare misaligned one
            raw = np.array(raw)
        with warnings.catch_warnings():  # torch warns that the array is read-only: it is, and stays so
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.from_numpy(raw.view(mapped_as))
        return tensor.view(getattr(torch, viewed_as)).reshape(info.shape)
